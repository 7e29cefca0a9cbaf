package loadtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

func mustRun(t *testing.T, ctx context.Context, o Options) *Result {
	t.Helper()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestPercentilesMatchDirectComputation(t *testing.T) {
	f := newFakeServer(t)
	f.delayFor = func(n int64) time.Duration {
		// A spread of latencies: most fast, a tail up to ~3ms.
		if n%10 == 0 {
			return time.Duration(n%31) * 100 * time.Microsecond
		}
		return 0
	}
	f.serve()
	var mu sync.Mutex
	var samples []int64
	var res *Result
	// At least 500 samples so the tail ranks are distinct; a busy machine
	// may serve fewer in the first window, so the window doubles until
	// it has them (the comparison itself does not depend on the count).
	for window := 500 * time.Millisecond; ; window *= 2 {
		samples = samples[:0]
		o := Options{URL: f.url, Connections: 4, Duration: window}
		o.sample = func(_ kind, ns int64) {
			mu.Lock()
			samples = append(samples, ns)
			mu.Unlock()
		}
		res = mustRun(t, context.Background(), o)
		if int64(len(samples)) != res.Requests {
			t.Fatalf("%d samples for %d requests", len(samples), res.Requests)
		}
		if len(samples) >= 500 {
			break
		}
		if window >= 8*time.Second {
			t.Fatalf("only %d requests in %v", len(samples), window)
		}
		t.Logf("%d requests in %v; a longer window", len(samples), window)
	}
	slices.Sort(samples)
	// Nearest rank, as HdrHistogram ranks: the ceil(q*n)-th smallest.
	direct := func(q float64) float64 {
		rank := int(q*float64(len(samples)) + 0.5)
		rank = max(1, min(rank, len(samples)))
		return float64(samples[rank-1]) / 1e3
	}
	check := func(name string, got, want float64) {
		// Three significant digits: the histogram reports the top of the
		// bucket holding the value, at most 0.1% above it.
		if got < want*0.999-0.001 || got > want*1.001+0.001 {
			t.Errorf("%s: reported %.3fµs, direct %.3fµs", name, got, want)
		}
	}
	l := res.Latency
	check("p50", l.P50, direct(0.50))
	check("p90", l.P90, direct(0.90))
	check("p99", l.P99, direct(0.99))
	check("p99.9", l.P999, direct(0.999))
	check("max", l.Max, float64(samples[len(samples)-1])/1e3)
	check("min", l.Min, float64(samples[0])/1e3)
	if l.P99 <= l.P50 {
		t.Errorf("no spread: p50 %v p99 %v", l.P50, l.P99)
	}
}

func TestErrorRateThreshold(t *testing.T) {
	f := newFakeServer(t)
	f.statusFor = func(n int64) (int, string) {
		switch n % 20 {
		case 0:
			return 500, "internal"
		case 1:
			return 429, "rate_limited"
		}
		return 200, ""
	}
	f.serve()
	run := func(max float64, count4xx bool) *Result {
		return mustRun(t, context.Background(), Options{
			URL: f.url, Connections: 2, Duration: 200 * time.Millisecond,
			MaxErrorRate: max, Count4xx: count4xx,
		})
	}
	// 5% are 500s: over a 1% limit.
	res := run(0.01, false)
	if !res.Failed || res.Throughput != nil {
		t.Fatalf("5%% errors passed a 1%% limit: rate %v failed %v", res.ErrorRate, res.Failed)
	}
	if res.ErrorRate < 0.04 || res.ErrorRate > 0.06 {
		t.Errorf("error rate %v, want about 0.05", res.ErrorRate)
	}
	// Under a 7% limit it passes; counting the 429s as well it does not.
	if res := run(0.07, false); res.Failed || res.Throughput == nil {
		t.Errorf("5%% errors failed a 7%% limit: %s", res.Failure)
	}
	if res := run(0.07, true); !res.Failed || res.ErrorRate < 0.09 {
		t.Errorf("with 4xx counted: rate %v failed %v", res.ErrorRate, res.Failed)
	}
	if res := run(-1, true); res.Failed {
		t.Errorf("no limit but failed: %s", res.Failure)
	}
}

func TestCancelReturnsPartialResult(t *testing.T) {
	f := newFakeServer(t)
	f.serve()
	for _, rate := range []float64{0, 2000} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		res := mustRun(t, ctx, Options{
			URL: f.url, Connections: 4, Rate: rate,
			Duration: 10 * time.Second, Warmup: 100 * time.Millisecond,
		})
		el := time.Since(start)
		cancel()
		if el > 2*time.Second {
			t.Errorf("rate %v: cancel took %v to return", rate, el)
		}
		if !res.Interrupted || res.Failed || res.Requests == 0 || res.Throughput == nil {
			t.Errorf("rate %v: interrupted %v failed %v (%s) requests %d",
				rate, res.Interrupted, res.Failed, res.Failure, res.Requests)
		}
		if res.ElapsedSec < 0.15 || res.ElapsedSec > 0.4 {
			t.Errorf("rate %v: measured window %.3fs, want about 0.2s", rate, res.ElapsedSec)
		}
		if rate > 0 && res.Missed != 0 {
			t.Errorf("rate %v: %d missed after an interrupt", rate, res.Missed)
		}
	}
}

func TestRunRefusesRemoteTarget(t *testing.T) {
	_, err := Run(context.Background(), Options{URL: "http://10.0.0.1:8080", Duration: time.Second})
	if err == nil {
		t.Fatal("remote target accepted")
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{URL: "http://127.0.0.1:1", Connections: -1},
		{URL: "http://127.0.0.1:1", Duration: 2 * time.Hour},
		{URL: "http://127.0.0.1:1", Scenario: "nope"},
		{URL: "http://127.0.0.1:1", CheckBody: "[1]"},
		{URL: "http://127.0.0.1:1", Rate: -5},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
