package shard

import (
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/invariant"
)

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
func (s *Shard) Record(ev *core.UsageEvent) { s.sendReserved(OutUsage, ev) }

// sendReserved sends a usage event or a commit journal entry into the ring
// room a reserveUsage call kept for it, numbering it for the DurableMark.
func (s *Shard) sendReserved(kind OutKind, ev *core.UsageEvent) {
	s.usageReserved--
	s.usageSeq++
	if !s.send(Outbound{Kind: kind, From: s.cfg.ID, Usage: *ev, Seq: s.usageSeq}) {
		invariant.Violated(invariant.LostUsage, "a billed event found no ring room although room was reserved")
	}
}

// Release returns an unused slot.
func (s *Shard) Release() { s.usageReserved-- }

// send queues m for the control plane without cutting its nap short.
// Routine traffic (usage, refills, acknowledgements) does not need the
// plane this instant: while traffic flows the plane naps on a short beat
// and looks at every ring anyway, so a busy shard makes no doorbell syscall
// for it — until the ring is a quarter full, when waiting for the beat
// would risk shedding. An idle plane sleeps without a beat: then the first
// message rings it (NotifyIfAsleep). Forwarded operations, which a client
// is waiting on, use the outbox's Push, which always rings.
func (s *Shard) send(m Outbound) bool {
	r := s.outbox.Ring()
	if !r.Push(m) {
		return false
	}
	if r.Len() > r.Cap()/4 {
		s.outbox.Notify()
	} else {
		s.outbox.NotifyIfAsleep()
	}
	return true
}
