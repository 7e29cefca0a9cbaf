// Package ring provides a bounded, lock-free, single-producer single-consumer
// queue of fixed-size messages and a doorbell that wakes a consumer sleeping
// in a poller such as epoll.
//
// A shard thread and the control-plane goroutine exchange work only through
// these rings, so the hot path never takes a lock, never allocates and never
// enters the kernel: Push and Pop are a few loads and stores on memory the
// calling side owns, plus one atomic store that publishes the new index.
//
// Exactly one goroutine may act as the producer (Push, PushBatch) and exactly
// one as the consumer (Pop, PopBatch) at any moment. Handing either role to
// another goroutine requires a happens-before edge between the old and the new
// holder (a channel send, a mutex, a WaitGroup). Len and Cap are safe from any
// goroutine.
package ring

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// MaxCapacity is the largest capacity New accepts. It keeps a mistyped size
// from becoming a multi-gigabyte allocation.
const MaxCapacity = 1 << 30

// ErrCapacity is returned by New for a capacity that is not a power of two
// in [1, MaxCapacity].
var ErrCapacity = errors.New("ring: capacity must be a power of two between 1 and 1<<30")

// falseSharingRange is the span kept free of anything the other side writes.
// It is two 64-byte cache lines because Intel's adjacent-line prefetcher pulls
// lines in 128-byte pairs, so a neighbour within the pair would still bounce.
const falseSharingRange = 128

// sidePad fills a consumer or producer to falseSharingRange bytes: after three
// 64-bit words and a slice header (whose size is the same for every element
// type, so a non-generic slice can stand in for []T).
const sidePad = falseSharingRange - 3*8 - unsafe.Sizeof([]byte(nil))

// consumer is the part of a Ring that only the consumer writes. The producer
// reads head, but only when its cached copy says the ring is full.
//
// buf and mask duplicate the producer's copies so that each side reads only
// its own cache line in the common case; both are set once in New.
type consumer[T any] struct {
	head      atomic.Uint64 // next index to read; monotonically increasing
	tailCache uint64        // last tail the consumer loaded; tailCache <= tail
	mask      uint64
	buf       []T
	_         [sidePad]byte
}

// producer is the part of a Ring that only the producer writes.
type producer[T any] struct {
	tail      atomic.Uint64 // next index to write; monotonically increasing
	headCache uint64        // last head the producer loaded; headCache <= head
	mask      uint64
	buf       []T
	_         [sidePad]byte
}

// Ring is a bounded single-producer single-consumer queue of T values.
//
// Indices are free-running 64-bit counters; a slot is index & mask. They
// cannot wrap in practice (at one message per nanosecond, 2^64 takes 584
// years), so tail-head is always the number of queued messages and
// 0 <= tail-head <= Cap() holds at every instant.
//
// Slots are plain memory: a slot is written by the producer before the tail
// store that publishes it, and read by the consumer after the tail load that
// observes it; the reverse holds for head and slot reuse. Those atomic
// accesses are the only synchronisation, and they are what the race detector
// sees.
//
// Popped slots are not cleared, so a T holding pointers keeps its referents
// alive until the slot is overwritten; rings are meant for small
// pointer-free messages.
type Ring[T any] struct {
	_ [falseSharingRange]byte // keeps the previous heap object off c's lines
	c consumer[T]
	p producer[T]
	_ [falseSharingRange]byte // keeps the next heap object off p's lines
}

// New returns an empty ring with room for capacity messages. capacity must be
// a power of two so that the slot of an index is a mask, not a division.
func New[T any](capacity int) (*Ring[T], error) {
	if capacity < 1 || capacity > MaxCapacity || capacity&(capacity-1) != 0 {
		return nil, ErrCapacity
	}
	buf := make([]T, capacity)
	r := &Ring[T]{}
	r.c.buf, r.c.mask = buf, uint64(capacity-1)
	r.p.buf, r.p.mask = buf, uint64(capacity-1)
	return r, nil
}

// Cap returns the number of messages the ring holds when full.
func (r *Ring[T]) Cap() int {
	return len(r.p.buf)
}

// Len returns the number of queued messages. Called concurrently with Push
// or Pop it is a snapshot that may be stale by the time it returns, which is
// what a depth gauge wants.
func (r *Ring[T]) Len() int {
	// Load head first: head only grows and tail never falls behind it, so a
	// later tail load cannot make the difference negative. It can exceed Cap
	// if both sides moved between the loads, hence the clamp.
	h := r.c.head.Load()
	t := r.p.tail.Load()
	n := t - h
	if n > uint64(len(r.p.buf)) {
		n = uint64(len(r.p.buf))
	}
	return int(n)
}

// Push appends v and reports whether there was room. It never blocks; a full
// ring is the producer's back-pressure signal. Producer only.
func (r *Ring[T]) Push(v T) bool {
	p := &r.p
	t := p.tail.Load()
	if t-p.headCache > p.mask {
		// Looks full from the cached head; only now touch the consumer's line.
		p.headCache = r.c.head.Load()
		if t-p.headCache > p.mask {
			return false
		}
	}
	p.buf[t&p.mask] = v
	p.tail.Store(t + 1) // publishes the slot written above
	return true
}

// PushBatch appends as many of vs as fit, in order, and returns how many went
// in. The tail is published once for the whole batch, so the consumer sees
// either none or all of them. Producer only.
func (r *Ring[T]) PushBatch(vs []T) int {
	p := &r.p
	t := p.tail.Load()
	size := p.mask + 1
	free := size - (t - p.headCache)
	if free < uint64(len(vs)) {
		p.headCache = r.c.head.Load()
		free = size - (t - p.headCache)
	}
	n := len(vs)
	if uint64(n) > free {
		n = int(free)
	}
	if n == 0 {
		return 0
	}
	// The batch may wrap past the end of buf: copy it in at most two pieces.
	i := t & p.mask
	k := copy(p.buf[i:], vs[:n])
	copy(p.buf, vs[k:n])
	p.tail.Store(t + uint64(n))
	return n
}

// Pop removes and returns the oldest message; ok is false if the ring is
// empty. Consumer only.
func (r *Ring[T]) Pop() (v T, ok bool) {
	c := &r.c
	h := c.head.Load()
	if h == c.tailCache {
		// Looks empty from the cached tail; only now touch the producer's line.
		c.tailCache = r.p.tail.Load()
		if h == c.tailCache {
			return v, false
		}
	}
	v = c.buf[h&c.mask]
	c.head.Store(h + 1) // hands the slot back to the producer
	return v, true
}

// PopBatch moves up to len(dst) of the oldest messages into dst, in order,
// and returns how many it moved. The head is published once for the batch.
// Consumer only.
func (r *Ring[T]) PopBatch(dst []T) int {
	c := &r.c
	h := c.head.Load()
	avail := c.tailCache - h
	if avail < uint64(len(dst)) {
		c.tailCache = r.p.tail.Load()
		avail = c.tailCache - h
	}
	n := len(dst)
	if uint64(n) > avail {
		n = int(avail)
	}
	if n == 0 {
		return 0
	}
	i := h & c.mask
	k := copy(dst[:n], c.buf[i:])
	copy(dst[k:n], c.buf)
	c.head.Store(h + uint64(n))
	return n
}

// Empty reports whether the ring holds no message, from a fresh load of
// the producer's tail: what a consumer that announces sleep must check for
// a second ring besides its doorbell's (node's hand-over port). Consumer
// only.
func (r *Ring[T]) Empty() bool { return r.empty() }

// empty reports whether the ring is empty, always loading the producer's
// tail rather than trusting the cache. The doorbell needs that fresh load for
// its sleep protocol. Consumer only.
func (r *Ring[T]) empty() bool {
	c := &r.c
	c.tailCache = r.p.tail.Load()
	return c.head.Load() == c.tailCache
}
