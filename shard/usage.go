package shard

import (
	"github.com/tollgated/tollgated/control/message"
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
func (s *Shard) Record(ev *core.UsageEvent) { s.sendReserved(message.OutUsage, ev) }

// sendReserved sends a usage event or a commit journal entry into the ring
// room a reserveUsage call kept for it, numbering it for the DurableMark.
func (s *Shard) sendReserved(kind message.OutKind, ev *core.UsageEvent) {
	s.usageReserved--
	s.usageSeq++
	if !s.send(message.Outbound{Kind: kind, From: s.cfg.ID, Usage: *ev, Seq: s.usageSeq}) {
		invariant.Violated(invariant.LostUsage, "a billed event found no ring room although room was reserved")
	}
}

// Release returns an unused slot.
func (s *Shard) Release() { s.usageReserved-- }

// HandOver rings the control plane if it naps while messages wait in the
// outbox and no spool sync is in flight. The event loop calls it when it is
// about to block: no request will join those messages before the plane's
// next beat, a millisecond away, and the usage among them waits for the
// plane to hand it to the spool before its fdatasync can start and its
// answers leave. A plane that is awake needs no ring; one that sleeps was
// rung by the first message; one whose sync is in flight passes over every
// ring when it ends (SpoolSyncing).
//
// Measured (BENCHMARKS.md): durable /v1/check at 64 connections on one CPU
// went from 48–49k to 57–66k a second, and from 16.0 to 14.3 µs of CPU a
// check: the shard no longer idles while its usage waits for the beat.
func (s *Shard) HandOver() {
	if s.outbox.Ring().Len() > 0 && (s.cfg.Syncing == nil || !s.cfg.Syncing.Load()) {
		s.outbox.Notify()
	}
}

// send queues m for the control plane without cutting its nap short.
// Routine traffic (usage, refills, acknowledgements) does not need the
// plane this instant: while traffic flows the plane naps on a short beat
// and looks at every ring anyway, so a busy shard makes no doorbell syscall
// for it — until the ring is a quarter full, when waiting for the beat
// would risk shedding. An idle plane sleeps without a beat: then the first
// message rings it (NotifyIfAsleep). Forwarded operations, which a client
// is waiting on, use the outbox's Push, which always rings.
func (s *Shard) send(m message.Outbound) bool {
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
