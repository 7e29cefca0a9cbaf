// Command grpcload drives a rate-limit service over gRPC as Envoy does:
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on a few
// long-lived HTTP/2 connections, many calls in flight on each, in a closed
// loop. It is the gRPC counterpart of wrk in bench/peers.sh: the server
// under test is whatever answers ADDR (tollgated's --grpc-listen, or
// envoyproxy/ratelimit's gRPC port).
//
// After -warmup it counts calls for -duration and prints one line:
//
//	calls=N ok=N over_limit=N errors=N seconds=S calls_per_sec=R p50_us=U p99_us=U cpu_us_per_call=C,...
//
// where cpu_us_per_call lists, for each process -pids names, its user +
// system CPU (/proc/PID/stat) over the measured window, per call counted.
//
// It exits 1 if no call succeeded, or if more than 1% failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18189", "the rate-limit service's gRPC address")
	conns := flag.Int("conns", 2, "HTTP/2 connections (Envoy opens one per worker)")
	inflight := flag.Int("inflight", 32, "calls in flight on each connection")
	domain := flag.String("domain", "tollgated", "the request's domain")
	entry := flag.String("entry", "account=demo", "the descriptor's entry, key=value")
	hits := flag.Uint("hits", 1, "hits_addend")
	warmup := flag.Duration("warmup", 2*time.Second, "calls before counting")
	duration := flag.Duration("duration", 8*time.Second, "calls counted")
	pidList := flag.String("pids", "", "comma-separated server processes whose CPU per call to report")
	flag.Parse()
	var pids []int
	for _, f := range strings.FieldsFunc(*pidList, func(r rune) bool { return r == ',' }) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "grpcload: -pids:", err)
			os.Exit(2)
		}
		pids = append(pids, pid)
	}
	key, value, ok := strings.Cut(*entry, "=")
	if !ok || *conns < 1 || *conns > 64 || *inflight < 1 || *inflight > 1024 {
		fmt.Fprintln(os.Stderr, "grpcload: -entry is key=value; -conns 1..64; -inflight 1..1024")
		os.Exit(2)
	}
	req := &rlsv3.RateLimitRequest{Domain: *domain, HitsAddend: uint32(*hits),
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
	res, err := run(*addr, *conns, *inflight, req, *warmup, *duration, pids)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcload:", err)
		os.Exit(1)
	}
	fmt.Println(res)
	if res.over > 0 {
		fmt.Fprintf(os.Stderr, "grpcload: %d of %d calls refused (first: %s)\n", res.over, res.calls, res.firstOver)
	}
	if res.ok+res.over == 0 || res.errors*100 > res.calls {
		fmt.Fprintf(os.Stderr, "grpcload: %d of %d calls failed (first: %v)\n", res.errors, res.calls, res.firstErr)
		os.Exit(1)
	}
}

type result struct {
	calls, ok, over, errors int64
	seconds                 float64
	p50, p99                int64   // µs
	cpu                     []int64 // clock ticks of each -pids process over the window
	firstErr                error
	firstOver               string // the first refusal's response headers
}

func (r result) String() string {
	line := fmt.Sprintf("calls=%d ok=%d over_limit=%d errors=%d seconds=%.3f calls_per_sec=%.0f p50_us=%d p99_us=%d",
		r.calls, r.ok, r.over, r.errors, r.seconds, float64(r.calls)/r.seconds, r.p50, r.p99)
	if len(r.cpu) > 0 {
		per := make([]string, len(r.cpu))
		for i, t := range r.cpu {
			per[i] = fmt.Sprintf("%.2f", float64(t)/clockTicks*1e6/float64(max(r.calls, 1)))
		}
		line += " cpu_us_per_call=" + strings.Join(per, ",")
	}
	return line
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuTicks is the user + system time of process pid so far (fields 14 and
// 15 of /proc/PID/stat, counted after the command name's parenthesis).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q %q", pid, f[11], f[12])
	}
	return u + s, nil
}

// sampleCPU reads every pid's CPU at from and at to.
func sampleCPU(pids []int, from, to time.Time) ([]int64, error) {
	read := func() ([]int64, error) {
		out := make([]int64, len(pids))
		for i, p := range pids {
			t, err := cpuTicks(p)
			if err != nil {
				return nil, err
			}
			out[i] = t
		}
		return out, nil
	}
	time.Sleep(time.Until(from))
	c0, err := read()
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Until(to))
	c1, err := read()
	if err != nil {
		return nil, err
	}
	for i := range c1 {
		c1[i] -= c0[i]
	}
	return c1, nil
}

// run calls from conns×inflight goroutines until warmup+duration, counting
// only the calls that end within the measured window.
func run(addr string, conns, inflight int, req *rlsv3.RateLimitRequest, warmup, duration time.Duration, pids []int) (result, error) {
	clients := make([]rlsv3.RateLimitServiceClient, conns)
	for i := range clients {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, err
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), warmup+duration)
	defer cancel()
	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+duration)
	var (
		mu       sync.Mutex
		total    result
		hist     = hdrhistogram.New(1, 10_000_000, 3)
		errOnce  sync.Once
		firstErr atomic.Value
		overOnce sync.Once
		overWhy  atomic.Value // the first refusal's response headers
		wg       sync.WaitGroup
	)
	for _, c := range clients {
		for range inflight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine result
				h := hdrhistogram.New(1, 10_000_000, 3)
				for ctx.Err() == nil {
					t0 := time.Now()
					resp, err := c.ShouldRateLimit(ctx, req)
					t1 := time.Now()
					if t0.Before(from) || t1.After(to) {
						continue
					}
					mine.calls++
					_ = h.RecordValue(t1.Sub(t0).Microseconds())
					switch {
					case err != nil:
						mine.errors++
						errOnce.Do(func() { firstErr.Store(err) })
					case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
						mine.ok++
					default:
						mine.over++
						overOnce.Do(func() { overWhy.Store(fmt.Sprint(resp.GetResponseHeadersToAdd())) })
					}
				}
				mu.Lock()
				total.calls, total.ok, total.over, total.errors = total.calls+mine.calls, total.ok+mine.ok, total.over+mine.over, total.errors+mine.errors
				hist.Merge(h)
				mu.Unlock()
			}()
		}
	}
	var cpu []int64
	var cpuErr error
	cpuDone := make(chan struct{})
	go func() {
		defer close(cpuDone)
		if len(pids) > 0 {
			cpu, cpuErr = sampleCPU(pids, from, to)
		}
	}()
	wg.Wait()
	<-cpuDone
	if cpuErr != nil {
		return result{}, cpuErr
	}
	total.cpu = cpu
	total.seconds = duration.Seconds()
	total.p50, total.p99 = hist.ValueAtQuantile(50), hist.ValueAtQuantile(99)
	if why, ok := overWhy.Load().(string); ok {
		total.firstOver = why
	}
	if e, ok := firstErr.Load().(error); ok {
		total.firstErr = e
	}
	return total, nil
}
