// Package clock is a node's one reading of time: the wall clock plus an
// offset that only tests move. Everything that dates money — a lease's
// expiry, a sibling's idleness, a settlement, a forfeit — reads the node's
// Clock, so a test can say "an hour later" by advancing it instead of
// waiting an hour, and every part of the node sees the same hour pass.
//
// The clock only ever jumps forward. A jump closes the channel Jumped
// returned before it, so a goroutine sleeping until a deadline on the
// clock (the control plane) wakes and measures again: a real timer alone
// would keep waiting the real time it was armed with.
//
// Transport time (I/O deadlines, shutdown grace, a spool's fsync pacing)
// is not the clock's: a test that advances the clock does not make a
// socket time out.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is a node's time. A nil *Clock is the wall clock and never jumps:
// configurations leave it unset.
type Clock struct {
	offset atomic.Int64 // ns added to the wall clock; only grows
	// jumped is closed by the next Advance, which replaces it. Read
	// without a lock: a sleeping plane reads it every time it sleeps.
	jumped atomic.Pointer[chan struct{}]
	mu     sync.Mutex // one Advance at a time
}

// New is a clock reading the wall clock until it is advanced.
func New() *Clock {
	c := &Clock{}
	ch := make(chan struct{})
	c.jumped.Store(&ch)
	return c
}

// Now is the clock's reading in Unix nanoseconds.
func (c *Clock) Now() int64 {
	if c == nil {
		return time.Now().UnixNano()
	}
	return time.Now().UnixNano() + c.offset.Load()
}

// Time is Now as a time.Time.
func (c *Clock) Time() time.Time {
	if c == nil {
		return time.Now()
	}
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Offset is how far the clock is ahead of the wall clock.
func (c *Clock) Offset() time.Duration {
	if c == nil {
		return 0
	}
	return time.Duration(c.offset.Load())
}

// Jumped is closed when the clock next jumps. A nil clock's is nil: it
// never jumps, and a select on it never chooses it.
func (c *Clock) Jumped() <-chan struct{} {
	if c == nil {
		return nil
	}
	return *c.jumped.Load()
}

// Advance moves the clock d forward (d > 0) and wakes whoever waits on
// Jumped. Tests call it; nothing in a node does.
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		panic("clock: Advance needs a positive duration")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset.Add(int64(d))
	next := make(chan struct{})
	close(*c.jumped.Swap(&next))
}
