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
	if !s.outbox.Push(Outbound{Kind: OutUsage, From: s.cfg.ID, Usage: *ev}) {
		s.lostUsage++ // room was reserved: reaching here is a broken invariant
	}
}

// Release returns an unused slot.
func (s *Shard) Release() { s.usageReserved-- }
