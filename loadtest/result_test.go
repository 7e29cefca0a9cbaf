package loadtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	cases := []struct {
		name     string
		res      Result
		failed   bool
		rate     float64
		hasThput bool
	}{
		{"clean", Result{Requests: 100, ByStatus: map[int]int64{200: 100}, MaxErrorRate: 0.01, ElapsedSec: 1}, false, 0, true},
		{"5xx over", Result{Requests: 100, ByStatus: map[int]int64{200: 98, 503: 2}, MaxErrorRate: 0.01, ElapsedSec: 1}, true, 0.02, false},
		{"4xx ignored", Result{Requests: 100, ByStatus: map[int]int64{200: 90, 429: 10}, MaxErrorRate: 0.01, ElapsedSec: 1}, false, 0, true},
		{"4xx counted", Result{Requests: 100, ByStatus: map[int]int64{200: 90, 429: 10}, MaxErrorRate: 0.01, Count4xx: true, ElapsedSec: 1}, true, 0.1, false},
		{"transport", Result{Requests: 99, ByStatus: map[int]int64{200: 99}, TransportErrors: 1, MaxErrorRate: 0.001, ElapsedSec: 1}, true, 0.01, false},
		{"invalid", Result{Requests: 10, ByStatus: map[int]int64{200: 10}, Invalid: 5, MaxErrorRate: 0.1, ElapsedSec: 1}, true, 0.5, false},
		{"no limit", Result{Requests: 10, ByStatus: map[int]int64{500: 10}, MaxErrorRate: -1, ElapsedSec: 1}, false, 1, true},
		{"nothing", Result{MaxErrorRate: 0.01, ElapsedSec: 1}, true, 0, false},
		{"nothing interrupted", Result{MaxErrorRate: 0.01, Interrupted: true}, false, 0, false},
	}
	for _, c := range cases {
		c.res.judge()
		if c.res.Failed != c.failed || c.res.ErrorRate != c.rate || (c.res.Throughput != nil) != c.hasThput {
			t.Errorf("%s: failed %v rate %v throughput %v (%s)", c.name, c.res.Failed, c.res.ErrorRate, c.res.Throughput, c.res.Failure)
		}
	}
}

func TestFailedRunPrintsNoThroughput(t *testing.T) {
	res := Result{Requests: 100, ByStatus: map[int]int64{200: 50, 500: 50}, MaxErrorRate: 0.01, ElapsedSec: 2,
		hist: newHistogram(1e9)}
	res.judge()
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "req/s") || !strings.Contains(text.String(), "NOT REPORTED") {
		t.Errorf("failed run text:\n%s", text.String())
	}
	js, _ := json.Marshal(&res)
	if bytes.Contains(js, []byte("throughput_rps")) || !bytes.Contains(js, []byte(`"failed":true`)) {
		t.Errorf("failed run json: %s", js)
	}
}

func TestTextAndHistogramOutput(t *testing.T) {
	h := newHistogram(1e10)
	for i := int64(1); i <= 1000; i++ {
		h.RecordValue(i * 1000) // 1µs … 1ms
	}
	res := Result{Target: "http://127.0.0.1:1", Scenario: ScenarioCheck, Mode: "closed", Connections: 2, Pipeline: 1,
		Accounts: 1, Requests: 1000, Ops: 1000, ElapsedSec: 1, MaxErrorRate: 0.01,
		ByStatus: map[int]int64{200: 990, 429: 10}, ByCode: map[string]int64{"rate_limited": 10}, hist: h}
	res.Latency = summarize(h)
	res.judge()
	var text bytes.Buffer
	res.WriteText(&text)
	for _, want := range []string{"throughput   1,000.0 req/s", "p50 500µs", "p99 990µs", "200: 990  429: 10", "rate_limited: 10"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var hgrm bytes.Buffer
	if err := res.WriteHistogram(&hgrm); err != nil {
		t.Fatal(err)
	}
	out := hgrm.String()
	if !strings.HasPrefix(out, "       Value     Percentile TotalCount 1/(1-Percentile)") &&
		!strings.Contains(out, "Value\tPercentile\tTotalCount") {
		t.Errorf("histogram header:\n%.200s", out)
	}
	if !strings.Contains(out, "Total count    =         1000") || !strings.Contains(out, "1.000     1.000000") {
		t.Errorf("histogram body (values in ms):\n%s", out[max(0, len(out)-600):])
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.8: "1,234,568", -12345: "-12,345"} {
		if got := group(in, 0); got != want {
			t.Errorf("group(%v) = %q, want %q", in, got, want)
		}
	}
	if got := group(1234.56, 1); got != "1,234.6" {
		t.Errorf("group decimals: %q", got)
	}
	for in, want := range map[float64]string{12: "12µs", 1500: "1.50ms", 2.5e6: "2.50s"} {
		if got := us(in); got != want {
			t.Errorf("us(%v) = %q, want %q", in, got, want)
		}
	}
}
