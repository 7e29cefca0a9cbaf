package shard

import (
	"time"

	"github.com/valyala/fasthttp"
)

// Latency histograms per data-plane route.
//
// A request's latency is the time from the loop iteration that read it
// (Request.Now: the loop's clock reading after it woke) to its answer being
// ready: when Serve returns, or, for an answer Serve postponed (waiting for
// its usage to be durable, for funding, or for the shard that owns its
// reservation), when the shard completes it. It includes the time earlier
// requests of the same iteration took, which is what a client waits. It
// excludes the write to the socket and answers the transport gives itself
// (a 504 for a postponed answer that took too long, framing errors).
//
// Recording is a clock reading, a bucket search over 16 bounds and two
// plain increments on the shard's thread: no lock, no allocation, no
// atomic. The counters are published with the shard's Stats on its tick
// (Shard.Latency reads them) and summed over the shards when /metrics is
// scraped (BENCHMARKS.md has the cost).

// Route names a data-plane route in the latency histograms.
type Route uint8

const (
	RouteCheck Route = iota
	RouteAdmit
	RouteCommit
	RouteFinish
	RouteCancel
	RouteAuthz // /v1/authz and /v1/authz/…
	RouteAdmission
	RouteUsage
	RouteLivez
	RouteReadyz
	RouteUnmatched // any other path (404)
	NumRoutes
)

// RouteNames are the routes' label values, by Route.
var RouteNames = [NumRoutes]string{
	RouteCheck: "/v1/check", RouteAdmit: "/v1/admit", RouteCommit: "/v1/commit", RouteFinish: "/v1/finish",
	RouteCancel: "/v1/cancel", RouteAuthz: "/v1/authz", RouteAdmission: "/v1/admission", RouteUsage: "/v1/usage",
	RouteLivez: "/livez", RouteReadyz: "/readyz", RouteUnmatched: "unmatched",
}

// LatencyBounds are the histograms' bucket upper bounds (inclusive), 50 µs
// to 5 s in 1-2.5-5 steps: a warm in-memory answer takes tens of
// microseconds, a durable one waits for an fsync (milliseconds), a funding
// wait up to --funding-wait, a forwarded operation a ring round trip.
var LatencyBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

// NumLatencyBuckets counts the buckets: one per bound, and one above the
// largest.
const NumLatencyBuckets = len(LatencyBounds) + 1

// LatencyHistogram is one route's histogram on one shard.
type LatencyHistogram struct {
	// Counts[i] counts answers that took at most LatencyBounds[i] and more
	// than the bound before it; the last, those above the largest bound.
	// Not cumulative: the exporter accumulates.
	Counts [NumLatencyBuckets]uint64
	SumNs  uint64 // the sum of every latency counted, ns
}

// Count is how many answers h counted.
func (h *LatencyHistogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Add adds o's counts to h (summing shards).
func (h *LatencyHistogram) Add(o *LatencyHistogram) {
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.SumNs += o.SumNs
}

func (h *LatencyHistogram) observe(ns int64) {
	if ns < 0 { // the wall clock stepped back between the two readings
		ns = 0
	}
	h.Counts[latencyBucket(ns)]++
	h.SumNs += uint64(ns)
}

// latencyBucket is the index of the first bound ≥ ns. Most answers fall in
// the first buckets, so a forward scan ends early.
func latencyBucket(ns int64) int {
	for i, b := range LatencyBounds {
		if ns <= int64(b) {
			return i
		}
	}
	return len(LatencyBounds)
}

// Latency is a shard's histograms, by Route.
type Latency [NumRoutes]LatencyHistogram

// deferSlots bounds the postponed answers being timed at once. A slot is
// taken per postponement and freed when the answer is completed; a newer
// postponement that lands on a slot still held takes it over, and the
// older answer then goes untimed (counted: Shard.Latency returns it). With
// httploop's tickets (a per-loop sequence in the low bits) slot = ticket
// mod deferSlots makes the table a ring of the latest postponements, twice
// the default durability queue: only an answer older than 8192 later
// postponements can lose its slot.
const deferSlots = 2 * DefaultAckQueue

type deferredTiming struct {
	ticket uint64 // 0: free
	start  int64
	route  Route
}

// latencyRecorder times the shard's answers. Only the shard's thread uses
// it.
type latencyRecorder struct {
	hist    Latency
	untimed uint64 // completed answers whose timing slot had been taken over
	clock   func() int64

	// The request being served.
	route    Route
	start    int64
	deferred bool

	// Postponed answers: Serve hands handlers timedDefer in place of the
	// transport's Defer, which notes the ticket's route and start; the
	// shard completes through timedComplete, which records the latency.
	slots             []deferredTiming
	transportDefer    func() uint64
	transportComplete Completer
	timedDefer        func() uint64
	timedComplete     Completer

	off bool // benchmarks compare serving with recording off
}

// timeCompletions makes c the transport's completer and returns the one
// the shard calls instead. The functions are bound once, here: timing a
// postponed answer allocates nothing.
func (l *latencyRecorder) timeCompletions(c Completer) Completer {
	if l.slots == nil {
		l.slots = make([]deferredTiming, deferSlots)
		l.timedDefer = l.deferAnswer
		l.timedComplete = l.complete
	}
	if l.clock == nil {
		l.clock = wallClock
	}
	l.transportComplete = c
	return l.timedComplete
}

func wallClock() int64 { return time.Now().UnixNano() }

// begin starts timing r, which was read at r.Now.
func (l *latencyRecorder) begin(r *Request, path []byte) {
	if l.off {
		return
	}
	l.route, l.start, l.deferred = routeOf(path), r.Now, false
	if r.Defer != nil && l.timedDefer != nil {
		l.transportDefer, r.Defer = r.Defer, l.timedDefer
	}
}

// end records r's latency if it was answered at once, and gives r back
// its transport's Defer.
func (l *latencyRecorder) end(r *Request) {
	if l.off {
		return
	}
	if l.transportDefer != nil {
		r.Defer, l.transportDefer = l.transportDefer, nil
	}
	if !l.deferred {
		if l.clock == nil {
			l.clock = wallClock
		}
		l.hist[l.route].observe(l.clock() - l.start)
	}
}

// deferAnswer is the Defer handlers see while Serve runs.
func (l *latencyRecorder) deferAnswer() uint64 {
	t := l.transportDefer()
	l.deferred = true
	l.slots[t&(deferSlots-1)] = deferredTiming{ticket: t, start: l.start, route: l.route}
	return t
}

// complete answers a postponed request and records its latency.
func (l *latencyRecorder) complete(ticket uint64, fill func(*fasthttp.Response)) {
	l.transportComplete(ticket, fill)
	if l.off {
		return
	}
	e := &l.slots[ticket&(deferSlots-1)]
	if e.ticket != ticket || ticket == 0 {
		l.untimed++
		return
	}
	l.hist[e.route].observe(l.clock() - e.start)
	e.ticket = 0
}

// routeOf names path's route, as Serve dispatches it (by path alone: a
// wrong method on a route's path counts under the route).
func routeOf(path []byte) Route {
	switch string(path) { // compared in place: no allocation
	case "/v1/check":
		return RouteCheck
	case "/v1/admit":
		return RouteAdmit
	case "/v1/commit":
		return RouteCommit
	case "/v1/finish":
		return RouteFinish
	case "/v1/cancel":
		return RouteCancel
	case "/v1/admission":
		return RouteAdmission
	case "/v1/usage":
		return RouteUsage
	case "/livez":
		return RouteLivez
	case "/readyz":
		return RouteReadyz
	}
	if isAuthzPath(path) {
		return RouteAuthz
	}
	return RouteUnmatched
}

// deferSlots must be a power of two: slots are found by masking.
var _ = [1]struct{}{}[deferSlots&(deferSlots-1)]
