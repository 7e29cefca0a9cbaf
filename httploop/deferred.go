//go:build linux

package httploop

import "github.com/valyala/fasthttp"

// Deferred names an answer a handler postponed. It is a plain integer so it
// can travel through a ring to another thread and back; it is only ever
// redeemed on the loop that issued it. The zero value names nothing.
//
// Layout: the connection's slot in the high 24 bits, and in the low 40 a
// sequence number the loop increments per deferral. A handle is honoured only
// while its slot is open and waiting on that very sequence number, so a
// handle outliving its connection, or outliving an answer the loop already
// gave (504), is recognised as stale. Forging a match would take 2^40 more
// deferrals while the stale handle is still held.
type Deferred uint64

const seqBits = 40

// Defer postpones the answer to this request. The loop writes nothing for it
// until Complete is called with the returned handle (or DeferTimeout passes,
// and it answers 504), and dispatches none of the connection's later
// pipelined requests before then, so answers stay in request order. Whatever
// the handler put in Response is discarded. Calling Defer again returns the
// same handle.
func (x *Ctx) Defer() Deferred {
	if x.deferred != 0 {
		return x.deferred
	}
	l, c := x.loop, x.conn
	l.deferSeq++
	seq := l.deferSeq & (1<<seqBits - 1)
	if seq == 0 { // zero is reserved for "nothing"
		l.deferSeq++
		seq = 1
	}
	c.waiting = true
	c.deferSeq = seq
	c.deferStart = l.now
	c.deferMode = requestAnswer(x.Request)
	x.deferred = Deferred(uint64(c.slot)<<seqBits | seq)
	l.cnt.v[statDeferred]++
	return x.deferred
}

// Complete gives the answer for d: fill writes it into a fresh Response (a
// nil fill answers 200 with no body), which is then written to the
// connection, and the connection resumes with its next request. If d is
// stale (the connection closed meanwhile, or the loop already answered 504)
// fill is not called and Complete reports false.
//
// Complete must be called on the loop thread: from OnWake, OnTick, or a
// handler (for any deferred request, including the one being handled).
func (l *Loop) Complete(d Deferred, fill func(resp *fasthttp.Response)) bool {
	c := l.deferredConn(d)
	if c == nil {
		return false
	}
	if fill != nil {
		fill(&l.aux)
	}
	l.answerDeferred(c, &l.aux)
	return true
}

// Pending reports whether d still names a request whose connection waits
// for its answer: false once the connection closed or the loop answered
// it (504). Call it on the loop thread.
func (l *Loop) Pending(d Deferred) bool { return l.deferredConn(d) != nil }

// deferredConn returns the connection waiting on d, or nil.
func (l *Loop) deferredConn(d Deferred) *conn {
	slot := uint64(d) >> seqBits
	seq := uint64(d) & (1<<seqBits - 1)
	if seq == 0 || slot >= uint64(len(l.conns)) {
		return nil
	}
	c := l.conns[slot]
	if !c.open || !c.waiting || c.deferSeq != seq {
		return nil
	}
	return c
}

// answerDeferred writes resp as c's deferred answer and resumes c.
func (l *Loop) answerDeferred(c *conn, resp *fasthttp.Response) {
	c.waiting = false
	c.deferSeq = 0
	l.respond(c, resp, c.deferMode)
	resp.Reset()
	// Bytes already buffered behind the deferred request were not being
	// read by us, so their clock starts now.
	c.reqStart = 0
	l.queue(c)
}
