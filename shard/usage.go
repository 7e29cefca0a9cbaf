package shard

import "github.com/tollgated/tollgated/core"

// The shard is its own usage slot source. Reserving a slot claims room in
// the outbound ring for one usage event before the request body is read;
// the engine later records into it (the event goes to the ring, where room
// was kept) or releases it. So backpressure sheds before any work, and a
// billed event always finds room.

// reserveUsage claims one slot, or reports accounting backpressure.
func (s *Shard) reserveUsage() bool {
	r := s.outbox.Ring()
	if r.Cap()-r.Len()-s.usageReserved <= s.cfg.UsageHeadroom {
		return false
	}
	s.usageReserved++
	return true
}

// Record sends a billed event to the control plane.
func (s *Shard) Record(ev *core.UsageEvent) {
	s.usageReserved--
	s.usageSeq++
	if !s.send(Outbound{Kind: OutUsage, From: s.cfg.ID, Usage: *ev, Seq: s.usageSeq}) {
		s.lostUsage++ // room was reserved: reaching here is a broken invariant
	}
}

// Release returns an unused slot.
func (s *Shard) Release() { s.usageReserved-- }

// send queues m for the control plane without waking it. Routine traffic
// (usage, refills, acknowledgements) does not need the plane this instant:
// the plane looks at every shard's ring on a short beat anyway, so a busy
// shard makes no doorbell syscall for it — until the ring is a quarter
// full, when waiting for the beat would risk shedding. Forwarded
// operations, which a client is waiting on, use the outbox's Push, which
// always rings.
func (s *Shard) send(m Outbound) bool {
	r := s.outbox.Ring()
	if !r.Push(m) {
		return false
	}
	if r.Len() > r.Cap()/4 {
		s.outbox.Notify()
	}
	return true
}
