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
