package grpcapi

import (
	"context"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgated/tollgated/handover"
	"github.com/tollgated/tollgated/internal/handovertest"
)

// BenchmarkShouldRateLimit is the service's own work per decision, without
// grpc-go and without a shard: the descriptor decoded into a forward-auth
// call, handed over through a port to a goroutine that answers what a
// shard answers an admitted hit, and the answer read back into Envoy's
// response. Its allocations are what a call adds to grpc-go's own.
func BenchmarkShouldRateLimit(b *testing.B) {
	// The shard: an admitted hit's answer.
	port := handovertest.Serve(b, 4, func(c *handover.Call) {
		h := &c.Resp.Header
		h.Set("X-Tollgate-Account", "acme")
		h.Set("X-Tollgate-Request-Id", "61f3abf7e4470000dd9a23188957c668")
		h.Set("X-Tollgate-Units", "10")
		h.Set("RateLimit-Policy", `"requests";q=100;w=1`)
		h.Set("RateLimit", `"requests";r=99;t=1`)
	})
	s, err := Listen(Config{Listen: "127.0.0.1:0", Ports: []*handover.Port{port}, Domain: "tollgated",
		AccountEntry: "account", KeyHeader: "Authorization", Secret: make([]byte, 32), Binder: new(countingBinder),
		Ready: always, MaxHandOver: 4, MaxConns: 8, MaxStreams: 8, MaxHeaderBytes: testMaxHeaderBytes})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop(time.Now())
	svc := rateLimitService{s: s}
	req := &rlsv3.RateLimitRequest{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: "acme"}}}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatal(r, err)
		}
	}
}
