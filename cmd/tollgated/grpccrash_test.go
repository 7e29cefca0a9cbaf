//go:build linux

package main

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rateLimitLoad asks the gRPC rate-limit service for account from
// callers goroutines until ctx ends or the daemon goes away, recording
// the request id and units of every OK (the X-Tollgate-* fields the
// service adds to the upstream request).
func rateLimitLoad(ctx context.Context, rls rlsv3.RateLimitServiceClient, account string, callers int) *acked {
	a := &acked{units: make(map[string]uint64), denied: make(map[string]int)}
	req := &rlsv3.RateLimitRequest{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{descriptor("account", account)}}
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				r, err := rls.ShouldRateLimit(cctx, req)
				cancel()
				if err != nil {
					a.mu.Lock()
					a.denied["error "+status.Code(err).String()]++
					a.mu.Unlock()
					return // killed, or ctx ended
				}
				id, units := headerOf(r.RequestHeadersToAdd, "X-Tollgate-Request-Id"), headerOf(r.RequestHeadersToAdd, "X-Tollgate-Units")
				n, perr := strconv.ParseUint(units, 10, 64)
				a.mu.Lock()
				if r.OverallCode == rlsv3.RateLimitResponse_OK && id != "" && perr == nil {
					a.units[id] = n
				} else {
					a.denied[r.OverallCode.String()+" "+headerOf(r.ResponseHeadersToAdd, "X-Tollgate-Reason")]++
				}
				a.mu.Unlock()
			}
		}()
	}
	a.wait = wg.Wait
	return a
}

// TestKill9LosesNoGRPCAdmittedUsage: hits the gRPC rate-limit service
// answered OK are billed exactly once after kill -9 and a restart — an OK
// is sent only once its usage is on disk, as /v1/check's 200 is.
func TestKill9LosesNoGRPCAdmittedUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--lease-ttl", "5s", "--lease-grace", "1s", "--usage-history", "1000000", "--grpc-listen", "127.0.0.1:0"}
	p := startProc(t, dir, flags...)
	p.provision("edge", 60_000, 10)
	p.gatewayPolicy("edge", 10, 0, 0)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := rateLimitLoad(ctx, rlsv3.NewRateLimitServiceClient(grpcConn(t, p)), "edge", 16)
	a.awaitAcked(t, 1000) // a sixth of what the account can pay for
	p.kill9()
	a.wait()
	cancel()
	t.Logf("acknowledged before kill -9: %d (other answers %v)", len(a.units), a.denied)
	p = startProc(t, dir, flags...)
	p.stop()
	billedExactlyOnce(t, dir, "edge", a)
}

// TestSIGTERMUnderGRPCLoadAnswersAndBillsEveryCall: a daemon stopped while
// gRPC rate-limit calls are in flight on two shards exits cleanly, answers
// every call (none waits out its deadline: the shards' desks hold calls
// until they are answered, and a drain waits for them), and bills every
// hit it answered OK exactly once, with every lease released.
func TestSIGTERMUnderGRPCLoadAnswersAndBillsEveryCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	p := startProc(t, dir, "--shards", "2", "--usage-history", "1000000", "--grpc-listen", "127.0.0.1:0")
	p.provision("edge", 1_000_000, 10)
	p.gatewayPolicy("edge", 10, 0, 0)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := rateLimitLoad(ctx, rlsv3.NewRateLimitServiceClient(grpcConn(t, p)), "edge", 16)
	a.awaitAcked(t, 500)
	p.stop() // exit 0 within 30 s, or the test fails
	a.wait()
	cancel()
	a.mu.Lock()
	hung := a.denied["error "+codes.DeadlineExceeded.String()]
	a.mu.Unlock()
	t.Logf("answered OK before and during the stop: %d (other answers %v)", len(a.units), a.denied)
	if hung != 0 {
		t.Fatalf("%d calls waited out their deadline across the stop", hung)
	}
	billedExactlyOnce(t, dir, "edge", a)
}
