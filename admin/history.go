package admin

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The recent past of the node's traffic, for the dashboard: a new tab
// draws the last minutes at once instead of only what it saw since it
// opened. The node samples, every historyInterval, the series the
// dashboard draws (Config.History: the same collectors /metrics serves,
// without the runtime's and the process's, which cost more to read), and
// keeps the last historySamples of them: a fixed ring, the oldest sample
// overwritten by the newest. GET /v1/metrics/history serves them.
const (
	historyInterval = 2 * time.Second
	historySamples  = 150 // five minutes at historyInterval
)

// historySample is one sampling of the drawn series, cumulative as the
// registry holds them: the reader takes rates between samples.
type historySample struct {
	At          int64                         `json:"t"`           // Unix ms
	Requests    map[string]float64            `json:"requests"`    // by shard
	Admitted    float64                       `json:"admitted"`    // all shards
	Denials     map[string]float64            `json:"denials"`     // by reason
	Connections map[string]float64            `json:"connections"` // by shard
	InFlight    map[string]float64            `json:"in_flight"`   // reservations, by shard
	Latency     map[string]map[string]float64 `json:"latency"`     // route → bucket bound ("+Inf") → count
}

// history is the ring of samples; mu guards it (the sampler writes, admin
// requests read).
type history struct {
	mu      sync.Mutex
	samples []historySample // at most historySamples, oldest at next once full
	next    int
}

func (h *history) add(s historySample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) < historySamples {
		h.samples = append(h.samples, s)
		return
	}
	h.samples[h.next] = s
	h.next = (h.next + 1) % historySamples
}

// ordered returns the samples, oldest first. The maps are never written
// after add, so sharing them is safe.
func (h *history) ordered() []historySample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]historySample, 0, len(h.samples))
	out = append(out, h.samples[h.next:]...)
	return append(out, h.samples[:h.next]...)
}

// KeepHistory starts sampling Config.History every historyInterval, until
// StopHistory (or until the listener Serve started shuts down). Call it
// after Serve, once what History reads may be read (the daemon: once its
// data plane serves), and call StopHistory before what it reads goes away:
// a sampling runs outside any request, so shutting the listener down does
// not wait for it.
func (s *Server) KeepHistory() {
	s.histMu.Lock()
	defer s.histMu.Unlock()
	if s.history == nil || s.served == nil || s.stopHistory != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.served)
	done := make(chan struct{})
	s.stopHistory = func() {
		cancel()
		<-done
	}
	go func() {
		defer close(done)
		s.sampleHistory(ctx)
	}()
}

// StopHistory stops the sampling KeepHistory started and returns once no
// sampling runs. Calling it without KeepHistory, or again, does nothing.
func (s *Server) StopHistory() {
	s.histMu.Lock()
	stop := s.stopHistory
	s.histMu.Unlock()
	if stop != nil {
		stop()
	}
}

// sampleHistory samples History every historyInterval until ctx ends.
func (s *Server) sampleHistory(ctx context.Context) {
	t := time.NewTicker(historyInterval)
	defer t.Stop()
	s.sampleOnce()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sampleOnce()
		}
	}
}

// sampleOnce adds one sample of History to the history. A gather that
// fails in part still yields the families it could read.
func (s *Server) sampleOnce() {
	families, err := s.history.Gather()
	if err != nil {
		s.log.Debug().Err(err).Msg("admin: sampling the metrics history: some series failed")
	}
	s.hist.add(sampleOf(families, s.now()/int64(time.Millisecond)))
}

// sampleOf picks the dashboard's series out of a gathering.
func sampleOf(families []*dto.MetricFamily, atMs int64) historySample {
	h := historySample{At: atMs, Requests: map[string]float64{}, Denials: map[string]float64{},
		Connections: map[string]float64{}, InFlight: map[string]float64{}, Latency: map[string]map[string]float64{}}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "tollgated_http_requests_total":
				h.Requests[label(m, "shard")] = m.GetCounter().GetValue()
			case "tollgated_admitted_total":
				h.Admitted += m.GetCounter().GetValue()
			case "tollgated_denials_total":
				h.Denials[label(m, "reason")] = m.GetCounter().GetValue()
			case "tollgated_http_connections":
				h.Connections[label(m, "shard")] = m.GetGauge().GetValue()
			case "tollgated_reservations_in_flight":
				h.InFlight[label(m, "shard")] = m.GetGauge().GetValue()
			case "tollgated_request_duration_seconds":
				buckets := map[string]float64{"+Inf": float64(m.GetHistogram().GetSampleCount())}
				for _, b := range m.GetHistogram().GetBucket() {
					buckets[strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] = float64(b.GetCumulativeCount())
				}
				h.Latency[label(m, "route")] = buckets
			}
		}
	}
	return h
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// metricsHistory: GET /v1/metrics/history → the samples, oldest first,
// the interval they were taken at, and the node's clock now (Unix ms), so
// a reader on another clock can place them on its own.
func (s *Server) metricsHistory(w http.ResponseWriter, r *http.Request) error {
	if _, err := readQuery(r); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, struct {
		IntervalMs int64           `json:"interval_ms"`
		NowMs      int64           `json:"now_ms"`
		Samples    []historySample `json:"samples"`
	}{historyInterval.Milliseconds(), s.now() / int64(time.Millisecond), s.hist.ordered()})
}
