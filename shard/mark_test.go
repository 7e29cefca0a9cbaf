package shard

import "testing"

// A shard's loop must never block while a published durable mark is not
// applied: the plane rings only a shard that has announced sleep, so a mark
// stored just before the announcement is seen by the announcement itself.
func TestWakerRefusesSleepOverAnUnappliedMark(t *testing.T) {
	h := durableHarness(t, 8)
	h.do("POST", "/v1/check", "key-acme", chatBody)
	w := h.s.Waker()
	if !w.BeginSleep() {
		t.Fatal("nothing published and nothing queued: the loop may sleep")
	}
	w.EndSleep()
	h.s.DurableMark().Publish(1) // the plane, before the loop announces sleep
	if w.BeginSleep() {
		t.Fatal("slept over a published mark: the parked answer would wait for the next tick")
	}
	h.s.Poll(t0 + 1)
	if len(h.parked) != 0 {
		t.Fatalf("%d answers still parked after the mark was applied", len(h.parked))
	}
	if !w.BeginSleep() {
		t.Fatal("the mark is applied: the loop may sleep again")
	}
	w.EndSleep()
}

// TestHandOverRingsANappingPlaneOnlyWhenItCanAct: the loop is about to
// block with a check's usage in the outbox. A napping plane with no sync in
// flight is rung once (without it the usage waits for the plane's beat, a
// millisecond); one whose sync is in flight, or that is awake, is not; an
// empty outbox rings nobody.
func TestHandOverRingsANappingPlaneOnlyWhenItCanAct(t *testing.T) {
	syncing := new(SpoolSyncing)
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: 8, Syncing: syncing}, 1024)
	h.provision("acme", "key-acme", 1_000_000)
	h.drainOut()

	h.s.HandOver()
	if n := h.out.Rings(); n != 0 {
		t.Fatalf("empty outbox: %d rings", n)
	}
	h.do("POST", "/v1/check", "key-acme", chatBody)
	h.s.HandOver()
	if n := h.out.Rings(); n != 0 {
		t.Fatalf("the plane is awake (it announced no nap): %d rings", n)
	}
	h.drainOut()
	if !h.out.BeginNap() { // the plane, having found every ring empty
		t.Fatal("the outbox is drained: the plane may nap")
	}
	h.do("POST", "/v1/check", "key-acme", chatBody)
	if n := h.out.Rings(); n != 0 {
		t.Fatalf("routine usage does not cut a nap short: %d rings", n)
	}
	syncing.Set(true)
	h.s.HandOver()
	if n := h.out.Rings(); n != 0 {
		t.Fatalf("a sync is in flight, after which the plane passes over every ring: %d rings", n)
	}
	syncing.Set(false)
	h.s.HandOver()
	h.s.HandOver()
	if n := h.out.Rings(); n != 1 {
		t.Fatalf("napping plane, no sync in flight, usage waiting: %d rings, want 1", n)
	}
}
