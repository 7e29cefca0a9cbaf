package ring

import (
	"errors"
	"sync/atomic"
	"time"
)

var errClosed = errors.New("ring: doorbell already closed")

// Doorbell pairs a Ring with a wake-up file descriptor so that a consumer
// blocked in epoll_wait (or poll, kqueue) learns that messages arrived.
//
// Ringing costs a system call, so the producer rings only when the consumer
// has announced that it is going to sleep. The protocol, with every access
// sequentially consistent (all sync/atomic operations are):
//
//	consumer (BeginSleep)          producer (Push, Notify)
//	  sleeping = 1                   tail = t+1       (publish message)
//	  load tail; empty? -> block     load sleeping; 1? -> ring
//
// This is Dekker's pattern: each side stores its own word and then loads the
// other's. In the single total order of those four accesses each load comes
// after its own side's store, so the load of the side that stored last comes
// after both stores and sees the other's. If the producer stored last, it
// sees the flag and rings. If the consumer stored last, it sees the message
// and does not sleep. Both may happen (a spurious ring, which costs one extra
// wake-up); neither cannot, so a message is never left in the ring of a
// sleeping consumer. On amd64 an atomic store is an XCHG, a full fence, which
// is what keeps the store-then-load order in hardware too.
//
// The producer takes the flag with a compare-and-swap before ringing, so one
// sleep costs at most one system call however many messages follow it.
//
// A consumer driving an epoll loop uses it like this:
//
//	for {
//		drain the ring with Pop / PopBatch
//		timeout := 0
//		if d.BeginSleep() {
//			timeout = -1 // nothing queued and the producer will ring
//		}
//		events := epoll_wait(timeout)
//		d.EndSleep()
//		if events include d.FD() {
//			d.Drain()
//		}
//		...
//	}
//
// A consumer with no poller of its own calls Wait instead of epoll_wait.
type Doorbell[T any] struct {
	r    *Ring[T]
	bell bell
	_    [falseSharingRange]byte

	// sleeping is written by the consumer at each sleep and read by the
	// producer at each push; it sits away from the ring's index lines so that
	// those stay private to their sides.
	sleeping atomic.Uint32
	rings    atomic.Uint64 // how many times the producer rang; written only when it does
	_        [falseSharingRange - 16]byte
}

// NewDoorbell wraps r. From then on the producer must push through the
// doorbell (Push, PushBatch), or call Notify after pushing through r
// directly, or a sleeping consumer may miss the message.
func NewDoorbell[T any](r *Ring[T]) (*Doorbell[T], error) {
	d := &Doorbell[T]{r: r}
	if err := d.bell.open(); err != nil {
		return nil, err
	}
	return d, nil
}

// Ring returns the wrapped ring. The consumer pops from it directly.
func (d *Doorbell[T]) Ring() *Ring[T] {
	return d.r
}

// FD returns the descriptor the consumer adds to its poller for readability.
// It is an eventfd on Linux, the read end of a pipe on other Unix systems and
// -1 where neither exists (there only Wait can sleep).
func (d *Doorbell[T]) FD() int {
	return d.bell.fd()
}

// Push pushes v and wakes the consumer if it sleeps. Producer only.
func (d *Doorbell[T]) Push(v T) bool {
	if !d.r.Push(v) {
		return false
	}
	d.Notify()
	return true
}

// PushBatch pushes as many of vs as fit and wakes the consumer if it sleeps
// and anything went in. Producer only.
func (d *Doorbell[T]) PushBatch(vs []T) int {
	n := d.r.PushBatch(vs)
	if n > 0 {
		d.Notify()
	}
	return n
}

// The consumer's announcement, in the sleeping word.
const (
	awake   = 0
	asleep  = 1 // blocked until rung: every push rings
	napping = 2 // blocked until a short timeout: only urgent pushes ring
)

// Notify rings if the consumer has announced that it sleeps or naps. Call
// it after publishing through Ring() directly. When the consumer is awake it
// is one load of a line the consumer rarely writes. Producer only.
func (d *Doorbell[T]) Notify() {
	if s := d.sleeping.Load(); s != awake && d.sleeping.CompareAndSwap(s, awake) {
		d.rings.Add(1)
		d.bell.ring()
	}
}

// NotifyIfAsleep rings only if the consumer sleeps without a timeout: a
// napping consumer wakes on its own soon and finds the message then. It is
// for routine messages that need not cut a nap short but must not be left
// in the ring of a consumer that will not wake by itself. Producer only.
func (d *Doorbell[T]) NotifyIfAsleep() {
	if d.sleeping.Load() == asleep && d.sleeping.CompareAndSwap(asleep, awake) {
		d.rings.Add(1)
		d.bell.ring()
	}
}

// BeginSleep announces that the consumer is about to block on FD with no
// timeout of its own and reports whether it may: false means messages are
// already queued and the consumer should pop them instead. After true, the
// producer rings on its next push (Notify or NotifyIfAsleep). Call EndSleep
// once the poller returns, whatever woke it. Consumer only.
func (d *Doorbell[T]) BeginSleep() bool { return d.announce(asleep) }

// BeginNap is BeginSleep for a consumer that blocks with a short timeout:
// only Notify rings it, NotifyIfAsleep does not. Consumer only.
func (d *Doorbell[T]) BeginNap() bool { return d.announce(napping) }

func (d *Doorbell[T]) announce(how uint32) bool {
	d.sleeping.Store(how)
	if !d.r.empty() {
		d.sleeping.Store(awake)
		return false
	}
	return true
}

// EndSleep withdraws the announcement made by BeginSleep, so pushes stop
// ringing. Consumer only.
func (d *Doorbell[T]) EndSleep() {
	d.sleeping.Store(awake)
}

// Drain resets the descriptor to not readable. Call it when the poller
// reports FD readable; it costs one system call. Consumer only.
func (d *Doorbell[T]) Drain() {
	d.bell.drain()
}

// Wait blocks until the producer rings or timeout passes (a negative timeout
// waits forever) and reports whether it rang; a ring it reports is already
// drained. It is for consumers without a poller of their own, and goes
// between BeginSleep and EndSleep as epoll_wait would. On Unix it blocks in
// poll(2), which parks the OS thread, not just the goroutine. Consumer only.
func (d *Doorbell[T]) Wait(timeout time.Duration) bool {
	if !d.bell.wait(timeout) {
		return false
	}
	d.bell.drain()
	return true
}

// Rings returns how many times the producer has rung, that is how many system
// calls the doorbell cost it. It is for tests and metrics.
func (d *Doorbell[T]) Rings() uint64 {
	return d.rings.Load()
}

// Close releases the descriptor. The producer must have stopped first: a ring
// after Close would write to a closed, possibly reused, descriptor.
func (d *Doorbell[T]) Close() error {
	return d.bell.close()
}
