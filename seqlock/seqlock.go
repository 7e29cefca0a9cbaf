// Package seqlock publishes a small fixed record from one writer to readers
// on other threads without locks.
//
// A Cell holds up to Words 64-bit words and a sequence word. The writer makes
// the sequence odd, stores the words, then makes it even again; a reader that
// sees the same even sequence before and after loading the words has a record
// no write overlapped. Every word is a sync/atomic value, so the race detector
// sees the protocol as the synchronisation it is, and Go's sequentially
// consistent atomics give the ordering the protocol needs.
//
// The sequence word also says whether a record is present at all, so the
// common "nothing published" case costs a reader one atomic load.
package seqlock

import "sync/atomic"

// Words is the number of 64-bit words a Cell carries.
const Words = 4

// Sequence word layout: bit 0 is set while a write is in progress, bit 1 is
// set while a record is present, and the rest counts writes.
const (
	writing = 1 << 0
	present = 1 << 1
	step    = 1 << 2
)

// Record is a value that packs into a Cell's words. Both methods take value
// receivers: a pointer handed through a type parameter escapes to the heap,
// and Load must not allocate.
type Record[T any] interface {
	Pack() [Words]uint64
	Unpack(w [Words]uint64) T
}

// Cell is a single-writer, many-reader publication slot for one record.
// Store and Clear must only be called by one goroutine at a time.
type Cell[T Record[T]] struct {
	seq   atomic.Uint64
	words [Words]atomic.Uint64
}

// Store publishes r, replacing any previous record.
func (c *Cell[T]) Store(r T) {
	w := r.Pack()
	s := c.seq.Load()
	c.seq.Store((s | writing) &^ present)
	for i := range w {
		c.words[i].Store(w[i])
	}
	c.seq.Store((s&^(writing|present) + step) | present)
}

// Clear withdraws the record; readers see none after it returns.
func (c *Cell[T]) Clear() {
	s := c.seq.Load()
	c.seq.Store((s&^(writing|present) + step))
}

// maxSpins bounds how long a reader waits for a writer in progress. The writer
// holds the odd sequence for four stores, so a reader that keeps seeing it is
// being starved by the scheduler, not by the protocol; it reports "busy".
const maxSpins = 64

// Load returns the published record. ok is false when none is present, or in
// the rare case that writes kept overlapping the read for maxSpins attempts;
// callers must treat both as "no evidence", never as a value.
func (c *Cell[T]) Load() (r T, ok bool) {
	for range maxSpins {
		s1 := c.seq.Load()
		if s1&present == 0 && s1&writing == 0 {
			return r, false
		}
		if s1&writing != 0 {
			continue
		}
		var w [Words]uint64
		for i := range w {
			w[i] = c.words[i].Load()
		}
		if c.seq.Load() == s1 {
			return r.Unpack(w), true
		}
	}
	return r, false
}

// Present reports, with one atomic load, whether a record may be published.
func (c *Cell[T]) Present() bool {
	return c.seq.Load()&(present|writing) != 0
}

// Version counts completed writes and clears. Readers can use it to tell
// whether anything changed between two loads.
func (c *Cell[T]) Version() uint64 {
	return c.seq.Load() / step
}
