package shard

import (
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// DurableMark is how the control plane tells a shard which of its usage
// events are on disk: the number of the last one (message.Outbound.Seq of an
// message.OutUsage or message.OutCommit). Only the plane stores it, only forward; the
// shard reads it each Poll and releases the answers parked on events up to
// it (ack.go).
//
// It is a word, not a ring message, because it only ever says "up to
// here": a newer mark replaces the older. The plane stores it once per spool
// sync for each shard whose events the sync carried; as messages, those
// were most of the plane's ring traffic with many lightly loaded shards.
//
// Wake-ups: the plane stores the mark, then rings the shard's inbox
// doorbell if the shard sleeps; the shard announces sleep (Waker), then
// loads the mark. With both sides sequentially consistent (Dekker's pattern,
// as in ring.Doorbell), a shard never sleeps on a mark it has not applied.
type DurableMark struct {
	_ cpu.CacheLinePad
	v atomic.Uint64
	_ cpu.CacheLinePad
}

// Publish moves the mark to seq. The control plane only.
func (d *DurableMark) Publish(seq uint64) { d.v.Store(seq) }

// Load returns the mark.
func (d *DurableMark) Load() uint64 { return d.v.Load() }

// SpoolSyncing says whether a spool sync the control plane started holds
// usage and has not ended. One per node: the plane stores it after each
// pass, every shard reads it when its loop is about to block (HandOver).
// When such a sync ends the plane passes over every ring, so a shard going
// idle need not ring it for the messages it left in its outbox.
//
// Without it an idle shard rang a plane that could do nothing with the
// messages yet: at 17k checks/s in open loop that cost about 5 µs of CPU a
// check in the plane's extra wake-ups (BENCHMARKS.md).
type SpoolSyncing struct {
	_ cpu.CacheLinePad
	v atomic.Bool
	_ cpu.CacheLinePad
}

// Set records whether a sync holding usage is in flight. The control plane
// only, after its pass and before it naps: a shard that read true before
// the store pushed before that read, so the plane's nap, which looks at
// every ring first, finds its messages (Dekker's pattern, as in
// ring.Doorbell).
func (f *SpoolSyncing) Set(v bool) {
	if f.v.Load() != v {
		f.v.Store(v)
	}
}

// Load reports what Set last recorded.
func (f *SpoolSyncing) Load() bool { return f.v.Load() }

// DurableMark is the shard's durable mark, for the control plane's link.
func (s *Shard) DurableMark() *DurableMark { return s.mark }

// applyMark releases the answers parked on events the mark now covers.
func (s *Shard) applyMark() {
	if m := s.mark.Load(); m > s.markSeen {
		s.markSeen = m
		s.durable(m)
	}
}

// Waker is what the shard's event loop polls to learn of the plane's
// messages and marks: the inbox doorbell, whose announcement of sleep
// is refused while a published mark is not yet applied.
func (s *Shard) Waker() *Waker { return &s.waker }

// Waker wraps the inbox doorbell for the event loop (httploop.Waker).
type Waker struct{ s *Shard }

// FD is the doorbell's descriptor.
func (w *Waker) FD() int { return w.s.inbox.FD() }

// BeginSleep announces sleep and reports whether the loop may block: not
// while messages wait in the inbox or a newer mark is published.
func (w *Waker) BeginSleep() bool {
	s := w.s
	if !s.inbox.BeginSleep() {
		return false
	}
	if s.mark.Load() > s.markSeen {
		s.inbox.EndSleep()
		return false
	}
	return true
}

// EndSleep withdraws the announcement.
func (w *Waker) EndSleep() { w.s.inbox.EndSleep() }

// Drain resets the doorbell's descriptor.
func (w *Waker) Drain() { w.s.inbox.Drain() }
