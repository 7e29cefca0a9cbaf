package shard

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
)

// fakeClock makes the recorder read *at, so a test says how long an answer
// took.
func fakeClock(h *harness, at *int64) {
	h.s.lat.clock = func() int64 { return *at }
}

// bucketOf is the histogram bucket a latency of d falls in.
func bucketOf(d time.Duration) int { return latencyBucket(int64(d)) }

func TestLatencyBuckets(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {50 * time.Microsecond, 0}, {50*time.Microsecond + 1, 1}, {time.Millisecond, 4},
		{3 * time.Millisecond, 6}, {5 * time.Second, len(LatencyBounds) - 1}, {5*time.Second + 1, len(LatencyBounds)},
		{time.Hour, len(LatencyBounds)},
	} {
		if got := bucketOf(c.d); got != c.want {
			t.Errorf("bucket of %v = %d, want %d", c.d, got, c.want)
		}
	}
	for i := 1; i < len(LatencyBounds); i++ {
		if LatencyBounds[i] <= LatencyBounds[i-1] {
			t.Fatalf("bounds not increasing at %d", i)
		}
	}
}

func TestRouteOfNamesEveryServedPath(t *testing.T) {
	for path, want := range map[string]Route{
		"/v1/check": RouteCheck, "/v1/admit": RouteAdmit, "/v1/commit": RouteCommit, "/v1/finish": RouteFinish,
		"/v1/cancel": RouteCancel, "/v1/authz": RouteAuthz, "/v1/authz/api/chat": RouteAuthz,
		"/v1/admission": RouteAdmission, "/v1/usage": RouteUsage, "/livez": RouteLivez, "/readyz": RouteReadyz,
		"/": RouteUnmatched, "/v1/checks": RouteUnmatched, "/v1/authzx": RouteUnmatched,
	} {
		if got := routeOf([]byte(path)); got != want {
			t.Errorf("route of %q = %s, want %s", path, RouteNames[got], RouteNames[want])
		}
	}
	for r, name := range RouteNames {
		if name == "" {
			t.Errorf("route %d has no name", r)
		}
	}
}

// TestLatencyOfAnswersGivenAtOnce: an answer given while Serve runs counts
// in its route's histogram, from the loop's clock reading to the end of
// Serve, and reaches Stats when the shard publishes.
func TestLatencyOfAnswersGivenAtOnce(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	at := t0 + 1 + int64(30*time.Microsecond) // h.do serves at t0+1
	fakeClock(h, &at)
	if st, _, _ := h.do("POST", "/v1/check", "key-acme", chatBody); st != 200 {
		t.Fatalf("check = %d", st)
	}
	at = t0 + 1 + int64(700*time.Microsecond)
	h.do("GET", "/nowhere", "", "")
	h.do("GET", "/v1/check", "key-acme", "") // 405, under its path's route
	h.s.PublishStats()
	var lat Latency
	h.s.Latency(&lat)
	if c := lat[RouteCheck].Counts; c[0] != 1 || c[bucketOf(700*time.Microsecond)] != 1 || lat[RouteCheck].Count() != 2 {
		t.Fatalf("/v1/check histogram %v", c)
	}
	if want := uint64(730 * time.Microsecond); lat[RouteCheck].SumNs != want {
		t.Fatalf("/v1/check sum %d ns, want %d", lat[RouteCheck].SumNs, want)
	}
	if lat[RouteUnmatched].Count() != 1 || lat[RouteAdmit].Count() != 0 {
		t.Fatalf("unmatched %d, admit %d", lat[RouteUnmatched].Count(), lat[RouteAdmit].Count())
	}
}

// TestLatencyOfPostponedAnswers: an answer that waits for its usage to be
// durable is timed when it is released, not when Serve parks it; so is one
// forwarded to the shard that owns its reservation.
func TestLatencyOfPostponedAnswers(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4, AckDurable: true}, 1024)
	h.provision("acme", "key-acme", 100_000)
	at := t0 + 1
	fakeClock(h, &at)
	h.do("POST", "/v1/check", "key-acme", chatBody)
	if n := h.s.lat.hist[RouteCheck].Count(); n != 0 || len(h.parked) != 1 {
		t.Fatalf("parked answer counted at once (%d), or not parked (%d)", n, len(h.parked))
	}
	var seq uint64
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			seq = m.Seq
		}
	}
	at = t0 + 1 + int64(3*time.Millisecond)
	h.s.DurableMark().Publish(seq)
	h.s.Poll(at)
	if c := h.s.lat.hist[RouteCheck].Counts; len(h.parked) != 0 || c[bucketOf(3*time.Millisecond)] != 1 {
		t.Fatalf("released answer: parked %d, histogram %v", len(h.parked), c)
	}

	// A commit of shard 1's reservation is forwarded, and answered when
	// the owner's reply comes back.
	at = t0 + 1
	h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+reservationOf(1, 7)+`"}`)
	var fwd message.Outbound
	for _, m := range h.drainOut() {
		if m.Kind == message.OutForward {
			fwd = m
		}
	}
	if fwd.Ticket == 0 || h.s.lat.hist[RouteCommit].Count() != 0 {
		t.Fatalf("not forwarded (%+v), or counted before the reply", fwd)
	}
	at = t0 + 1 + int64(200*time.Microsecond)
	h.in.Push(message.Inbound{Kind: message.InReply, Op: message.OpCommit, Ticket: fwd.Ticket, Status: uint16(outcomeOK)})
	h.s.Poll(at)
	if c := h.s.lat.hist[RouteCommit].Counts; c[bucketOf(200*time.Microsecond)] != 1 || h.s.lat.untimed != 0 {
		t.Fatalf("forwarded commit histogram %v, untimed %d", c, h.s.lat.untimed)
	}
}

// TestLatencyUntimedWhenSlotTakenOver: a postponed answer whose slot a
// later one took is completed untimed, and counted as such, never timed
// with another answer's start.
func TestLatencyUntimedWhenSlotTakenOver(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	at := t0 + 1
	fakeClock(h, &at)
	h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+reservationOf(1, 7)+`"}`)
	old := h.tickets
	// Another postponement lands on the same slot.
	h.tickets += deferSlots - 1
	h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+reservationOf(1, 8)+`"}`)
	h.drainOut()
	h.in.Push(message.Inbound{Kind: message.InReply, Op: message.OpCommit, Ticket: old, Status: uint16(outcomeOK)})
	h.s.Poll(at)
	h.s.PublishStats()
	var lat Latency
	if untimed := h.s.Latency(&lat); untimed != 1 || lat[RouteCommit].Count() != 0 {
		t.Fatalf("untimed %d, counted %d", untimed, lat[RouteCommit].Count())
	}
}

// TestLatencyRecordingAllocatesNothing: timing answers — given at once and
// postponed until durable — allocates nothing, and does count them.
func TestLatencyRecordingAllocatesNothing(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: 16}, 1<<16)
	h.provision("acme", "key-acme", 1<<50)
	h.s.SetCompleter(func(uint64, func(*fasthttp.Response)) {})
	r := reusedCheck()
	probe := &Request{Req: fasthttp.AcquireRequest(), Resp: &fasthttp.Response{}}
	probe.Req.SetRequestURI("/livez")
	now := t0
	run := func() {
		now += 2e6
		r.Now, probe.Now = now, now
		h.s.Serve(r)
		m, _ := h.out.Ring().Pop()
		h.s.DurableMark().Publish(m.Seq)
		h.s.Poll(now)
		h.s.Serve(probe)
		h.s.PublishStats()
	}
	requireNoAllocsWhenWarm(t, "timing answers", run)
	var lat Latency
	if untimed := h.s.Latency(&lat); lat[RouteCheck].Count() < 1000 || lat[RouteLivez].Count() < 1000 || untimed != 0 {
		t.Fatalf("counted %d checks, %d probes, %d untimed", lat[RouteCheck].Count(), lat[RouteLivez].Count(), untimed)
	}
}

// BenchmarkServeLatency compares serving /v1/check (answered at once, and
// published each time as the loop does on a quiet shard) with the latency
// recording on and off, side by side.
func BenchmarkServeLatency(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "recording=off"
		if on {
			name = "recording=on"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b, 0, 1<<16)
			h.provision("acme", "key-acme", 1<<62)
			h.s.lat.off = !on
			r := reusedCheck()
			r.Defer = nil
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now += 2e6
				r.Now = now
				h.s.Serve(r)
				h.out.Ring().Pop()
				h.s.PublishStats()
			}
			if on && h.s.lat.hist[RouteCheck].Count() == 0 || !on && h.s.lat.hist[RouteCheck].Count() != 0 {
				b.Fatal("recording did not follow the switch")
			}
		})
	}
}

// BenchmarkLatencyRecorder is the recording alone, per answer given at
// once: the route lookup, the clock reading, the bucket search and the
// increments.
func BenchmarkLatencyRecorder(b *testing.B) {
	var l latencyRecorder
	r := &Request{Now: time.Now().UnixNano()}
	path := []byte("/v1/check")
	for b.Loop() {
		l.begin(r, path)
		l.end(r)
	}
	if l.hist[RouteCheck].Count() == 0 {
		b.Fatal("nothing recorded")
	}
}
