package loadtest

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Result is what a run measured. Only requests due inside the measured
// window (after warm-up, before the end or the interrupt) are counted.
type Result struct {
	Target      string   `json:"target"`
	Scenario    Scenario `json:"scenario"`
	Mix         string   `json:"mix,omitempty"`
	Mode        string   `json:"mode"` // "closed" or "open"
	TargetRate  float64  `json:"target_rate_rps,omitempty"`
	Connections int      `json:"connections"`
	Pipeline    int      `json:"pipeline"`
	Accounts    int      `json:"accounts"`
	Zipf        float64  `json:"zipf"`
	WarmupSec   float64  `json:"warmup_s"`
	ElapsedSec  float64  `json:"elapsed_s"` // the measured window
	Interrupted bool     `json:"interrupted"`

	Requests int64 `json:"requests"` // responses received
	Ops      int64 `json:"ops"`      // operations finished (a staged op is 3 requests)
	// Throughput is responses per second; absent when the run failed, so
	// that no script mistakes a failed run's figure for a measurement.
	Throughput *float64 `json:"throughput_rps,omitempty"`
	Latency    Latency  `json:"latency_us"`
	// SendLag (open loop) is how late requests were written after their
	// due time. Latency includes it; a large p50 here means the generator,
	// not the server, is the bottleneck.
	SendLag   *Latency              `json:"send_lag_us,omitempty"`
	ByKind    map[string]KindResult `json:"by_kind"`
	ByStatus  map[int]int64         `json:"by_status"`
	ByCode    map[string]int64      `json:"by_code"`
	Decisions map[string]int64      `json:"decisions,omitempty"`

	TransportErrors        int64            `json:"transport_errors"`
	TransportErrorsByClass map[string]int64 `json:"transport_errors_by_class"`
	Invalid                int64            `json:"invalid"`   // 2xx the scenario could not use
	Missed                 int64            `json:"missed"`    // open loop: due sends never written
	Abandoned              int64            `json:"abandoned"` // in flight when interrupted

	Errors       int64   `json:"errors"`
	ErrorRate    float64 `json:"error_rate"`
	MaxErrorRate float64 `json:"max_error_rate"`
	Count4xx     bool    `json:"count_4xx"`
	Failed       bool    `json:"failed"`
	Failure      string  `json:"failure,omitempty"`

	hist *hdrhistogram.Histogram
}

// Latency is a latency summary in microseconds.
type Latency struct {
	Min   float64 `json:"min"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	P9999 float64 `json:"p99_99"`
	Max   float64 `json:"max"`
}

// KindResult summarises one endpoint.
type KindResult struct {
	Requests int64   `json:"requests"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	Max      float64 `json:"max_us"`
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return Latency{
		Min:   us(h.Min()),
		Mean:  h.Mean() / 1e3,
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		P9999: us(h.ValueAtQuantile(99.99)),
		Max:   us(h.Max()),
	}
}

// result merges what the connections recorded.
func (r *run) result() *Result {
	o := r.opts
	res := &Result{
		Target:                 r.target.URL,
		Scenario:               o.Scenario,
		Mode:                   "closed",
		Connections:            o.Connections,
		Pipeline:               o.Pipeline,
		Accounts:               len(o.Accounts),
		Zipf:                   o.Zipf,
		WarmupSec:              o.Warmup.Seconds(),
		Interrupted:            r.interrupted.Load(),
		ByKind:                 map[string]KindResult{},
		ByStatus:               map[int]int64{},
		ByCode:                 map[string]int64{},
		Decisions:              map[string]int64{},
		TransportErrorsByClass: map[string]int64{},
		MaxErrorRate:           o.MaxErrorRate,
		Count4xx:               o.Count4xx,
		hist:                   newHistogram(r.highest),
	}
	if o.Scenario == ScenarioMix {
		m := o.Mix
		if len(m) == 0 {
			m = DefaultMix
		}
		res.Mix = m.String()
	}
	if o.Rate > 0 {
		res.Mode = "open"
		res.TargetRate = o.Rate
	}
	if w := time.Duration(r.end.Load() - r.warmupEnd); w > 0 {
		res.ElapsedSec = w.Seconds()
	}

	var kinds [numKinds]*hdrhistogram.Histogram
	var lag *hdrhistogram.Histogram
	for _, hs := range r.hists {
		if hs.lag != nil {
			if lag == nil {
				lag = newHistogram(r.highest)
			}
			lag.Merge(hs.lag)
		}
		for k, h := range hs.kinds {
			if h == nil {
				continue
			}
			if kinds[k] == nil {
				kinds[k] = newHistogram(r.highest)
			}
			kinds[k].Merge(h)
		}
	}
	for _, c := range r.conns {
		rec := c.rec
		for s, n := range rec.status {
			if n > 0 {
				res.ByStatus[s] += n
			}
		}
		for code, n := range rec.codes {
			res.ByCode[code] += *n
		}
		for d, n := range rec.decisions {
			res.Decisions[d] += *n
		}
		for cl, n := range rec.errs {
			res.TransportErrorsByClass[cl] += n
			res.TransportErrors += n
		}
		res.Invalid += rec.invalid
		res.Ops += rec.ops
		res.Abandoned += rec.abandoned
		res.Missed += c.missed
	}
	for k, h := range kinds {
		if h == nil {
			continue
		}
		res.hist.Merge(h)
		l := summarize(h)
		res.ByKind[kind(k).String()] = KindResult{Requests: h.TotalCount(), P50: l.P50, P99: l.P99, Max: l.Max}
	}
	if lag != nil {
		l := summarize(lag)
		res.SendLag = &l
	}
	res.Requests = res.hist.TotalCount()
	res.Latency = summarize(res.hist)
	res.judge()
	return res
}

// judge computes the error rate and decides whether the run failed.
func (res *Result) judge() {
	bad := res.TransportErrors + res.Invalid
	for s, n := range res.ByStatus {
		if s >= 500 || s == 0 || (res.Count4xx && s >= 400 && s < 500) {
			bad += n
		}
	}
	res.Errors = bad
	if total := res.Requests + res.TransportErrors; total > 0 {
		res.ErrorRate = float64(bad) / float64(total)
	}
	switch {
	case res.Requests == 0 && !res.Interrupted:
		res.Failed = true
		res.Failure = "no response was received in the measured window"
		if res.TransportErrors > 0 {
			res.ErrorRate = 1
		}
	case res.MaxErrorRate >= 0 && res.ErrorRate > res.MaxErrorRate:
		res.Failed = true
		res.Failure = fmt.Sprintf("error rate %.3f%% exceeds the maximum %.3f%% (%d of %d: %s)",
			100*res.ErrorRate, 100*res.MaxErrorRate, bad, res.Requests+res.TransportErrors, res.errorCounts())
	}
	if !res.Failed && res.ElapsedSec > 0 {
		t := float64(res.Requests) / res.ElapsedSec
		res.Throughput = &t
	}
}

func (res *Result) errorCounts() string {
	var parts []string
	for _, cl := range slices.Sorted(maps.Keys(res.TransportErrorsByClass)) {
		parts = append(parts, fmt.Sprintf("%s %d", cl, res.TransportErrorsByClass[cl]))
	}
	for _, s := range slices.Sorted(maps.Keys(res.ByStatus)) {
		if s >= 500 || s == 0 || (res.Count4xx && s >= 400) {
			parts = append(parts, fmt.Sprintf("HTTP %d: %d", s, res.ByStatus[s]))
		}
	}
	if res.Invalid > 0 {
		parts = append(parts, fmt.Sprintf("invalid %d", res.Invalid))
	}
	return strings.Join(parts, ", ")
}

// Histogram returns the merged latency histogram, in nanoseconds.
func (res *Result) Histogram() *hdrhistogram.Histogram { return res.hist }

// WriteHistogram writes the percentile distribution in HdrHistogram's
// text format (values in milliseconds), which HdrHistogram's plotting
// tools read.
func (res *Result) WriteHistogram(w io.Writer) error {
	_, err := res.hist.PercentilesPrint(w, 5, 1e6)
	return err
}

// WriteText writes the human-readable report.
func (res *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "closed loop"
	if res.Mode == "open" {
		mode = fmt.Sprintf("open loop at %s req/s", group(res.TargetRate, 0))
	}
	scen := string(res.Scenario)
	if res.Mix != "" {
		scen += " (" + res.Mix + ")"
	}
	dist := "uniform"
	if res.Zipf > 0 {
		dist = fmt.Sprintf("zipf %g", res.Zipf)
	}
	fmt.Fprintf(&b, "target       %s  scenario %s\n", res.Target, scen)
	fmt.Fprintf(&b, "load         %s, %d connections, pipeline %d, %d accounts (%s)\n",
		mode, res.Connections, res.Pipeline, res.Accounts, dist)
	window := fmt.Sprintf("%.2fs measured", res.ElapsedSec)
	if res.WarmupSec > 0 {
		window += fmt.Sprintf(" after %.3gs warm-up", res.WarmupSec)
	}
	if res.Interrupted {
		window += "  [INTERRUPTED: partial result]"
	}
	fmt.Fprintf(&b, "window       %s\n", window)
	fmt.Fprintf(&b, "requests     %s", group(float64(res.Requests), 0))
	if res.Ops != res.Requests {
		fmt.Fprintf(&b, " (%s operations)", group(float64(res.Ops), 0))
	}
	b.WriteString("\n")
	if res.Throughput != nil {
		fmt.Fprintf(&b, "throughput   %s req/s\n", group(*res.Throughput, 1))
	} else {
		fmt.Fprintf(&b, "throughput   NOT REPORTED: %s\n", res.Failure)
	}
	l := res.Latency
	fmt.Fprintf(&b, "latency      p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (min %s, mean %s)\n",
		us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.Max), us(l.Min), us(l.Mean))
	if len(res.ByKind) > 1 {
		for _, k := range kindNames {
			kr, ok := res.ByKind[k]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "  %-10s %s requests  p50 %s  p99 %s  max %s\n",
				k, group(float64(kr.Requests), 0), us(kr.P50), us(kr.P99), us(kr.Max))
		}
	}
	fmt.Fprintf(&b, "status       %s\n", joinCounts(res.ByStatus))
	if len(res.ByCode) > 0 {
		fmt.Fprintf(&b, "codes        %s\n", joinCounts(res.ByCode))
	}
	if len(res.Decisions) > 0 {
		fmt.Fprintf(&b, "decisions    %s\n", joinCounts(res.Decisions))
	}
	fmt.Fprintf(&b, "transport    %d errors", res.TransportErrors)
	if res.TransportErrors > 0 {
		fmt.Fprintf(&b, " (%s)", joinCounts(res.TransportErrorsByClass))
	}
	if res.Invalid > 0 {
		fmt.Fprintf(&b, ", %d unusable responses", res.Invalid)
	}
	if res.Abandoned > 0 {
		fmt.Fprintf(&b, ", %d abandoned at interrupt", res.Abandoned)
	}
	b.WriteString("\n")
	if res.SendLag != nil {
		l := *res.SendLag
		fmt.Fprintf(&b, "send lag     p50 %s  p99 %s  max %s  (written after due time; part of the latency)\n",
			us(l.P50), us(l.P99), us(l.Max))
	}
	if res.Mode == "open" {
		fmt.Fprintf(&b, "schedule     %d due sends never written", res.Missed)
		if res.Missed > 0 {
			b.WriteString(" — the rate was NOT held (add connections or pipeline depth, or lower the rate)")
		}
		b.WriteString("\n")
	}
	which := "transport errors, 5xx and unusable responses"
	if res.Count4xx {
		which = "transport errors, 4xx, 5xx and unusable responses"
	}
	limit := "no limit"
	if res.MaxErrorRate >= 0 {
		limit = fmt.Sprintf("max %.3f%%", 100*res.MaxErrorRate)
	}
	fmt.Fprintf(&b, "error rate   %.3f%% (%s; %s)\n", 100*res.ErrorRate, which, limit)
	_, err := io.WriteString(w, b.String())
	return err
}

func joinCounts[K int | string](m map[K]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%v: %d", k, m[k]))
	}
	return strings.Join(parts, "  ")
}

// us formats microseconds for reading: µs below a millisecond, ms above.
func us(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2fms", v/1e3)
	default:
		return fmt.Sprintf("%.0fµs", v)
	}
}

// group formats v with thousands separators.
func group(v float64, decimals int) string {
	s := fmt.Sprintf("%.*f", decimals, v)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}
