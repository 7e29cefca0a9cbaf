// Package handover carries forward-auth decisions from goroutines that are
// not shards (the gRPC listener's) to a shard's thread and back.
//
// Each shard has a Port: a bounded ring that any goroutine sends a Call
// into and only the shard's thread takes from, the way the control plane
// reaches the shards. The shard serves the call's request as it serves
// one read from a socket (the same handler, the same durable
// acknowledgement) and signals the caller when the answer is in the
// call's Response. The alternative this replaces, a loopback HTTP request
// to the data plane, cost a second request's system calls, parsing and
// wake-ups for every decision.
//
// Ownership of a Call moves with it: the caller's until Send, the shard's
// until it signals (Done or Fail), the caller's again once Wait has seen
// the signal. A caller that stops waiting abandons the call: the shard may
// still write it, so it is never reused.
package handover

import (
	"errors"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/ring"
)

// Errors of Send and Wait.
var (
	// ErrFull: the shard's port, or the calls it holds, are at the size
	// they were made for; the call was not decided.
	ErrFull = errors.New("handover: the shard holds as many calls as it can")
	// ErrClosed: the shard has stopped; the call was not decided.
	ErrClosed = errors.New("handover: the shard has stopped")
	// ErrNoAnswer: no answer came within the wait. The call's outcome is
	// unknown: the shard may have decided (and billed) it.
	ErrNoAnswer = errors.New("handover: no answer in time")
)

// Call is one decision: the caller fills Req, the shard fills Resp.
type Call struct {
	Req  fasthttp.Request
	Resp fasthttp.Response

	done   chan struct{} // one signal per hand-over, buffered: the shard never blocks
	failed error         // written by the shard before its signal: why it was not decided
	timer  *time.Timer   // the caller's, kept with the call: a wait allocates nothing
}

var calls = sync.Pool{New: func() any { return &Call{done: make(chan struct{}, 1)} }}

// Acquire returns an empty Call.
func Acquire() *Call { return calls.Get().(*Call) }

// Release returns c once Wait has returned nil or ErrClosed for it (or it
// was never sent). A call abandoned by ErrNoAnswer must not be released.
func Release(c *Call) {
	c.Req.Reset()
	c.Resp.Reset()
	c.failed = nil
	calls.Put(c)
}

// Done tells the caller the answer is in c.Resp. Shard only, once per Send.
func (c *Call) Done() { c.done <- struct{}{} }

// Fail tells the caller the shard did not decide c, and why: ErrClosed
// (it stopped) or ErrFull (it holds as many calls as it can). Shard only,
// once per Send, instead of Done.
func (c *Call) Fail(why error) {
	c.failed = why
	c.done <- struct{}{}
}

// Wait blocks until the shard signals c or wait passes.
func (c *Call) Wait(wait time.Duration) error {
	if c.timer == nil {
		c.timer = time.NewTimer(wait)
	} else {
		c.timer.Reset(wait) // a stopped timer's channel holds nothing (Go 1.23 timers)
	}
	select {
	case <-c.done:
		c.timer.Stop()
		return c.failed
	case <-c.timer.C:
		return ErrNoAnswer
	}
}

// Port is one shard's entrance.
type Port struct {
	// mu serialises the senders: the ring has a single producer side.
	// The shard's thread never takes it.
	mu     sync.Mutex
	closed bool
	q      *ring.Ring[*Call]
	wake   func()
}

// NewPort makes a port holding up to capacity calls (rounded up to a power
// of two); wake runs after each Send, on the sender's goroutine, and must
// wake the shard's thread if it sleeps (the shard's inbox doorbell's
// Notify: the shard checks the port when it announces sleep, so the
// doorbell's protocol covers both rings).
func NewPort(capacity int, wake func()) (*Port, error) {
	size := 1
	for size < capacity {
		size <<= 1
	}
	q, err := ring.New[*Call](size)
	if err != nil {
		return nil, err
	}
	return &Port{q: q, wake: wake}, nil
}

// Send hands c to the shard. On nil the shard owns c until it signals.
func (p *Port) Send(c *Call) error {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return ErrClosed
	case !p.q.Push(c):
		p.mu.Unlock()
		return ErrFull
	}
	p.mu.Unlock()
	p.wake()
	return nil
}

// Exchange sends c and waits for its answer.
func (p *Port) Exchange(c *Call, wait time.Duration) error {
	if err := p.Send(c); err != nil {
		return err
	}
	return c.Wait(wait)
}

// Take moves up to len(dst) waiting calls into dst. Shard only.
func (p *Port) Take(dst []*Call) int { return p.q.PopBatch(dst) }

// Empty reports whether no call waits. Shard only.
func (p *Port) Empty() bool { return p.q.Empty() }

// Close refuses further sends and fails the calls still waiting. Shard
// only, once its thread has stopped taking calls.
func (p *Port) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	var batch [64]*Call
	for {
		n := p.Take(batch[:])
		for _, c := range batch[:n] {
			c.Fail(ErrClosed)
		}
		if n < len(batch) {
			return
		}
	}
}
