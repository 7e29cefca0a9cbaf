package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
)

// top reads the node's /metrics every interval and shows what changed in
// it: requests per second, denials by reason, latency percentiles per
// route, load per shard.

// sample is what top keeps of one scrape.
type sample struct {
	at       time.Time
	requests map[string]float64 // per shard
	conns    map[string]float64
	inFlight map[string]float64
	admitted float64
	denials  map[string]float64             // per reason
	latency  map[string]map[float64]float64 // route → le → cumulative count
}

// frame is one refresh of top: rates over the interval between two samples.
type frame struct {
	At                time.Time          `json:"at"`
	IntervalSeconds   float64            `json:"interval_seconds"`
	RequestsPerSecond float64            `json:"requests_per_second"`
	AdmittedPerSecond float64            `json:"admitted_per_second"`
	DenialsPerSecond  map[string]float64 `json:"denials_per_second"` // reasons with any denial in the interval
	DenialsTotal      map[string]float64 `json:"denials_total"`      // reasons with any denial since start
	Routes            []routeFrame       `json:"routes"`
	Shards            []shardFrame       `json:"shards"`
}

type routeFrame struct {
	Route             string  `json:"route"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	P50Seconds        float64 `json:"p50_seconds"`
	P99Seconds        float64 `json:"p99_seconds"`
}

type shardFrame struct {
	Shard             string  `json:"shard"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	Connections       float64 `json:"connections"`
	InFlight          float64 `json:"reservations_in_flight"`
}

func (a *app) topCommand() *cobra.Command {
	var interval time.Duration
	var frames int
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of the node: requests/s, denials by reason, p50/p99 per route, load per shard",
		Long: `top scrapes the node's /metrics every --interval and shows the rates over
the last interval: requests and admissions per second, denials per second
by reason, p50 and p99 latency per data-plane route (from
tollgated_request_duration_seconds), and each shard's requests per second,
connections and reservations in flight. --frames N stops after N
refreshes; with --json each refresh is one JSON object per line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return usageError{fmt.Errorf("--interval %v: at least 100ms", interval)}
			}
			return a.top(cmd.Context(), interval, frames)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between refreshes")
	cmd.Flags().IntVar(&frames, "frames", 0, "stop after this many refreshes (0: until interrupted)")
	return cmd
}

func (a *app) top(ctx context.Context, interval time.Duration, frames int) error {
	prev, err := a.scrape(ctx)
	if err != nil {
		return err
	}
	clear := !a.json && isTerminal(a.out)
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; frames == 0 || n < frames; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := a.scrape(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted while reading: the usual way to leave
			}
			return err
		}
		f := diff(prev, cur)
		prev = cur
		if a.json {
			b, _ := json.Marshal(f)
			fmt.Fprintf(a.out, "%s\n", b)
			continue
		}
		if clear {
			fmt.Fprint(a.out, "\x1b[H\x1b[2J")
		}
		a.render(f)
	}
	return nil
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// scrape reads /metrics into a sample.
func (a *app) scrape(ctx context.Context) (*sample, error) {
	raw, err := a.c.do(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("reading /metrics: %w", err)
	}
	s := &sample{at: time.Now(), requests: map[string]float64{}, conns: map[string]float64{},
		inFlight: map[string]float64{}, denials: map[string]float64{}, latency: map[string]map[float64]float64{}}
	each := func(name string, f func(m *dto.Metric)) {
		if fam := fams[name]; fam != nil {
			for _, m := range fam.Metric {
				f(m)
			}
		}
	}
	each("tollgated_http_requests_total", func(m *dto.Metric) { s.requests[label(m, "shard")] = m.GetCounter().GetValue() })
	each("tollgated_http_connections", func(m *dto.Metric) { s.conns[label(m, "shard")] = m.GetGauge().GetValue() })
	each("tollgated_reservations_in_flight", func(m *dto.Metric) { s.inFlight[label(m, "shard")] = m.GetGauge().GetValue() })
	each("tollgated_admitted_total", func(m *dto.Metric) { s.admitted += m.GetCounter().GetValue() })
	each("tollgated_denials_total", func(m *dto.Metric) { s.denials[label(m, "reason")] = m.GetCounter().GetValue() })
	each("tollgated_request_duration_seconds", func(m *dto.Metric) {
		b := map[float64]float64{math.Inf(1): float64(m.GetHistogram().GetSampleCount())}
		for _, bk := range m.GetHistogram().GetBucket() {
			b[bk.GetUpperBound()] = float64(bk.GetCumulativeCount())
		}
		s.latency[label(m, "route")] = b
	})
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// diff is the frame between two samples.
func diff(prev, cur *sample) frame {
	dt := cur.at.Sub(prev.at).Seconds()
	rate := func(a, b float64) float64 { return math.Max(b-a, 0) / dt }
	f := frame{At: cur.at.UTC(), IntervalSeconds: dt, DenialsPerSecond: map[string]float64{}, DenialsTotal: map[string]float64{}}
	for _, shard := range sortedKeys(cur.requests) {
		r := rate(prev.requests[shard], cur.requests[shard])
		f.RequestsPerSecond += r
		f.Shards = append(f.Shards, shardFrame{Shard: shard, RequestsPerSecond: r, Connections: cur.conns[shard], InFlight: cur.inFlight[shard]})
	}
	slices.SortFunc(f.Shards, func(a, b shardFrame) int { return atoi(a.Shard) - atoi(b.Shard) })
	f.AdmittedPerSecond = rate(prev.admitted, cur.admitted)
	for reason, n := range cur.denials {
		if n > 0 {
			f.DenialsTotal[reason] = n
		}
		if r := rate(prev.denials[reason], n); r > 0 {
			f.DenialsPerSecond[reason] = r
		}
	}
	for _, route := range sortedKeys(cur.latency) {
		delta := map[float64]float64{}
		for le, n := range cur.latency[route] {
			delta[le] = math.Max(n-prev.latency[route][le], 0)
		}
		count := delta[math.Inf(1)]
		if count == 0 {
			continue // no answers on this route in the interval
		}
		f.Routes = append(f.Routes, routeFrame{Route: route, RequestsPerSecond: count / dt,
			P50Seconds: quantile(0.5, delta), P99Seconds: quantile(0.99, delta)})
	}
	return f
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// quantile estimates the q-quantile of a histogram given as cumulative
// counts by upper bound, interpolating linearly inside the bucket it
// falls in (as Prometheus's histogram_quantile does); in the +Inf bucket it
// answers the largest finite bound.
func quantile(q float64, cumulative map[float64]float64) float64 {
	bounds := make([]float64, 0, len(cumulative))
	for le := range cumulative {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	total := cumulative[math.Inf(1)]
	if total == 0 || len(bounds) < 2 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, le := range bounds {
		n := cumulative[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			if n == below {
				return le
			}
			return lower + (le-lower)*(rank-below)/(n-below)
		}
		lower, below = le, n
	}
	return lower
}

// render writes a frame for people.
func (a *app) render(f frame) {
	fmt.Fprintf(a.out, "tollgated %s   every %.1fs   %s\n\n", a.url, f.IntervalSeconds, f.At.Format(time.TimeOnly))
	denied := 0.0
	for _, r := range f.DenialsPerSecond {
		denied += r
	}
	fmt.Fprintf(a.out, "requests/s %.1f   admitted/s %.1f   denied/s %.1f\n\n", f.RequestsPerSecond, f.AdmittedPerSecond, denied)
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DENIAL REASON\tPER S\tTOTAL")
	for _, reason := range sortedKeys(f.DenialsTotal) {
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\n", reason, f.DenialsPerSecond[reason], f.DenialsTotal[reason])
	}
	fmt.Fprintln(tw, "\t\t")
	fmt.Fprintln(tw, "ROUTE\tREQ/S\tP50\tP99")
	for _, r := range f.Routes {
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\n", r.Route, r.RequestsPerSecond, seconds(r.P50Seconds), seconds(r.P99Seconds))
	}
	fmt.Fprintln(tw, "\t\t")
	fmt.Fprintln(tw, "SHARD\tREQ/S\tCONNECTIONS\tIN FLIGHT")
	for _, s := range f.Shards {
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\n", s.Shard, s.RequestsPerSecond, s.Connections, s.InFlight)
	}
	tw.Flush()
}

// seconds formats a latency for people: µs, ms or s.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
