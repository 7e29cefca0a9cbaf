package core

import "testing"

// TestWarmPathAllocatesNothing proves begin→admit→capacity→commit→finish,
// and the cheapest refusals, allocate nothing once warm.
func TestWarmPathAllocatesNothing(t *testing.T) {
	f := newFixture(t, func(_ *Snapshot, c *Config) { c.Gate = NewUniformGate(8) })
	var usage DiscardUsage
	work := []WorkItem{{Op: 0, Count: 98}, {Op: 2, Count: 1}}
	now := t0
	path := func() {
		now += 2e6
		ctx, reason := f.e.Begin(alice, 0b1, now)
		if reason.Denied() {
			t.Fatal(reason)
		}
		r, d := f.e.Admit(&ctx, work, usage.Slot(), now)
		if d.Denied() {
			t.Fatal(d)
		}
		f.e.AcquireCapacity(r)
		f.e.Commit(r, RequestID{Lo: 1}, now)
		f.e.Finish(r, 50, now)
		f.e.Expire(now)
	}
	if a := testing.AllocsPerRun(2000, path); a != 0 {
		t.Fatalf("full path allocates %v per request", a)
	}
	deny := func() {
		if _, d := f.e.Begin(Principal{Hi: 99}, 0, now); !d.Denied() {
			t.Fatal("admitted an unknown principal")
		}
		ctx, _ := f.e.Begin(alice, 0b1, now)
		if _, d := f.e.Admit(&ctx, nil, usage.Slot(), now); !d.Denied() {
			t.Fatal("admitted an empty workload")
		}
	}
	if a := testing.AllocsPerRun(2000, deny); a != 0 {
		t.Fatalf("refusals allocate %v", a)
	}
	if usage.Discarded == 0 || usage.Released == 0 {
		t.Fatalf("discarding slot counted nothing: %+v", usage)
	}
}
