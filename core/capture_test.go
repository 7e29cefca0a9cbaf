package core

import "testing"

// capture admits and commits oneReq for alice as a capture of kind c,
// expiring after ttl.
func (f *fixture) capture(c Capture, ttl int64) Reservation {
	f.t.Helper()
	ctx, reason := f.e.Begin(alice, 0, t0)
	if reason.Denied() {
		f.t.Fatal(reason)
	}
	ctx.SetTTL(ttl)
	ctx.SetCapture(c)
	r, d := f.e.Admit(&ctx, oneReq, f.usage, t0)
	if d.Denied() {
		f.t.Fatal(d)
	}
	must(f.t, f.e.AcquireCapacity(r))
	must(f.t, f.e.Commit(r, RequestID{Lo: uint64(c) + 1}, t0))
	return r
}

// TestUnfinishedCaptureBillsWhatItsKindSays: at its deadline, a committed
// capture of kind CaptureRelease bills nothing and one of CaptureBill (like
// any committed reservation) its quote; the commit journal's event says
// the same amount in advance, so a node killed before the deadline bills
// on restart what the deadline would have.
func TestUnfinishedCaptureBillsWhatItsKindSays(t *testing.T) {
	f := newFixture(t, nil)
	bill, release, plain := f.capture(CaptureBill, 1e9), f.capture(CaptureRelease, 1e9), f.capture(CaptureNone, 1e9)
	for _, c := range []struct {
		r     Reservation
		kind  Capture
		units CostUnits
	}{{bill, CaptureBill, 102}, {release, CaptureRelease, 0}, {plain, CaptureNone, 102}} {
		if got := f.e.CaptureOf(c.r); got != c.kind {
			t.Fatalf("CaptureOf = %d, want %d", got, c.kind)
		}
		if ev, ok := f.e.Committed(c.r, t0); !ok || ev.Units != c.units || ev.Quote != 102 {
			t.Fatalf("kind %d: journal event %+v, want %d units of a 102 quote", c.kind, ev, c.units)
		}
	}
	if n := f.e.Expire(t0 + 1e9); n != 3 {
		t.Fatalf("expired %d, want 3", n)
	}
	byID := map[uint64]UsageEvent{}
	for _, ev := range f.usage.events {
		byID[ev.RequestID.Lo] = ev
	}
	if ev := byID[uint64(CaptureRelease)+1]; !ev.Lapsed || ev.Units != 0 || ev.Quote != 102 {
		t.Fatalf("released capture billed %+v, want 0 units, lapsed", ev)
	}
	if ev := byID[uint64(CaptureBill)+1]; !ev.Lapsed || ev.Units != 102 {
		t.Fatalf("billed capture: %+v, want its quote", ev)
	}
	if got := f.lease(); got.Held != 0 || got.Billed != 204 {
		t.Fatalf("lease after the deadline: %+v", got)
	}
	if f.e.CaptureOf(release) != CaptureNone {
		t.Fatal("an ended reservation still reports its capture")
	}
	f.conserved()
}

// TestEndAllEndsCapturesByTheirKind: at shutdown a released capture bills
// nothing, like at its deadline.
func TestEndAllEndsCapturesByTheirKind(t *testing.T) {
	f := newFixture(t, nil)
	f.capture(CaptureRelease, 30e9)
	f.capture(CaptureBill, 30e9)
	if n := f.e.EndAll(); n != 2 {
		t.Fatalf("ended %d", n)
	}
	var units CostUnits
	for _, ev := range f.usage.events {
		units += ev.Units
	}
	if len(f.usage.events) != 2 || units != 102 {
		t.Fatalf("shutdown billed %+v", f.usage.events)
	}
	f.conserved()
}
