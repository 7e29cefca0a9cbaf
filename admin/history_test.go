package admin

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/internal/await"
)

// TestMetricsHistoryKeepsTheRecentPastOfTheDrawnSeries: the samples the
// node takes of the series the dashboard draws — requests and connections
// per shard, admissions, denials by reason, latency buckets per route —
// are served oldest first, at most historySamples of them (the oldest
// dropped), to any token with the metrics permission.
func TestMetricsHistoryKeepsTheRecentPastOfTheDrawnSeries(t *testing.T) {
	h := newHarness(t)
	// A Server of its own, not serving: only this test samples it.
	hasher, _ := credential.NewHasher(testSecret)
	reg := prometheus.NewRegistry()
	srv, err := New(Config{Store: h.store, Hasher: hasher, Publisher: h.pub, Registry: prometheus.NewRegistry(), History: reg,
		Now: h.now.Load})
	if err != nil {
		t.Fatal(err)
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgated_http_requests_total"}, []string{"shard"})
	denials := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgated_denials_total"}, []string{"reason"})
	admitted := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgated_admitted_total"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tollgated_request_duration_seconds",
		Buckets: []float64{0.001, 0.01}}, []string{"route"})
	reg.MustRegister(requests, denials, admitted, latency)

	for i := range historySamples + 5 {
		requests.WithLabelValues("0").Add(10)
		requests.WithLabelValues("1").Add(1)
		denials.WithLabelValues("unknown-principal").Inc()
		admitted.Add(9)
		latency.WithLabelValues("/v1/check").Observe(0.005)
		h.now.Store(startNs + int64(i)*int64(historyInterval))
		srv.sampleOnce()
	}
	secret, _ := h.tokenWithRole("metrics")
	get := func(path string) (int, []byte) {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, req)
		return w.Code, w.Body.Bytes()
	}
	status, b := get("/v1/metrics/history")
	var got struct {
		IntervalMs int64           `json:"interval_ms"`
		NowMs      int64           `json:"now_ms"`
		Samples    []historySample `json:"samples"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &got) != nil {
		t.Fatalf("history: %d %s", status, b)
	}
	if got.IntervalMs != 2000 || len(got.Samples) != historySamples || got.NowMs != h.now.Load()/1e6 {
		t.Fatalf("interval %d, now %d, %d samples", got.IntervalMs, got.NowMs, len(got.Samples))
	}
	first, last := got.Samples[0], got.Samples[len(got.Samples)-1]
	if first.At != (startNs+5*int64(historyInterval))/1e6 || last.At != (startNs+int64(historySamples+4)*int64(historyInterval))/1e6 {
		t.Fatalf("samples from %d to %d", first.At, last.At)
	}
	n := float64(historySamples + 5)
	if last.Requests["0"] != 10*n || last.Requests["1"] != n || last.Admitted != 9*n ||
		last.Denials["unknown-principal"] != n || first.Requests["0"] != 60 { // the five oldest dropped
		t.Fatalf("last sample %+v, first %+v", last, first)
	}
	if b := last.Latency["/v1/check"]; b["0.001"] != 0 || b["0.01"] != n || b["+Inf"] != n {
		t.Fatalf("latency buckets %v", b)
	}
	if status, b := get("/v1/metrics/history?minutes=5"); status != http.StatusBadRequest {
		t.Fatalf("a query: %d %s", status, b)
	}
}

// TestStopHistoryWaitsForTheSampler: once StopHistory returns, nothing
// samples History any more (the daemon then stops what History reads);
// calling it again, or without KeepHistory, is harmless.
func TestStopHistoryWaitsForTheSampler(t *testing.T) {
	h := newHarness(t)
	var gathers atomic.Int64
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		gathers.Add(1)
		return nil, nil
	})
	hasher, _ := credential.NewHasher(testSecret)
	srv, err := New(Config{Store: h.store, Hasher: hasher, Publisher: h.pub, History: g})
	if err != nil {
		t.Fatal(err)
	}
	srv.StopHistory() // before KeepHistory: nothing to stop
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, err := srv.Serve(ln, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	srv.KeepHistory()
	await.True(t, "a first sample", func() bool { return gathers.Load() > 0 }) // it samples at once
	srv.StopHistory()
	n := gathers.Load()
	srv.StopHistory()
	if len(srv.hist.ordered()) != int(n) {
		t.Fatalf("%d samples kept of %d gathers", len(srv.hist.ordered()), n)
	}
	if gathers.Load() != n {
		t.Fatal("sampled after StopHistory returned")
	}
}
