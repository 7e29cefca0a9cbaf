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
	if !s.send(Outbound{Kind: OutUsage, From: s.cfg.ID, Usage: *ev}) {
		s.lostUsage++ // room was reserved: reaching here is a broken invariant
	}
}

// Release returns an unused slot.
func (s *Shard) Release() { s.usageReserved-- }

// send queues m for the control plane without waking it: routine traffic
// (usage, refills, acknowledgements) is announced once per loop iteration
// by Flush, so a busy shard makes at most one doorbell syscall per
// iteration rather than one per request. Forwarded operations, which a
// client is waiting on, use the outbox's own Push, which rings at once.
func (s *Shard) send(m Outbound) bool {
	if !s.outbox.Ring().Push(m) {
		return false
	}
	s.unannounced = true
	return true
}

// Flush wakes the control plane if anything was queued since the last
// Flush. The shard's loop calls it at the end of every iteration; Poll
// calls it too.
func (s *Shard) Flush() {
	if s.unannounced {
		s.unannounced = false
		s.outbox.Notify()
	}
}
