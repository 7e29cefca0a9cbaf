//go:build linux

package httploop

import (
	"github.com/valyala/fasthttp"
)

// Handler serves one request on the loop thread. It must not block (the
// whole loop waits for it) and must not panic (nothing recovers). To answer
// later, it calls Ctx.Defer.
type Handler func(x *Ctx)

// Ctx is what a handler gets for one request. It and everything it points to
// belong to the loop and are valid only until the handler returns: a handler
// that defers copies what it needs from the request first.
type Ctx struct {
	// Request is the parsed request. Its body, if any, aliases the
	// connection's input buffer.
	Request *fasthttp.Request
	// Response is written to the connection when the handler returns
	// (unless it deferred). Status 200 with an empty body if untouched.
	// Setting Connection: close on it closes the connection after it.
	Response *fasthttp.Response
	// Now is the loop iteration's clock reading, Unix nanoseconds. Handlers
	// use it instead of reading the clock.
	Now int64
	// ConnID identifies the connection within this loop; never reused.
	ConnID uint64

	loop     *Loop
	conn     *conn
	deferred Deferred
}

// answer says how a response is to be written.
type answer struct {
	head   bool        // HEAD request: headers only
	http10 bool        // HTTP/1.0 request: keep-alive must be said explicitly
	close  bool        // close the connection after this response
	why    CloseReason // counted when close
}

// requestAnswer derives the answer for a parsed request.
func requestAnswer(req *fasthttp.Request) answer {
	return answer{
		head:   req.Header.IsHead(),
		http10: !req.Header.IsHTTP11(),
		// fasthttp sets this for Connection: close and for HTTP/1.0
		// without Connection: keep-alive.
		close: req.Header.ConnectionClose(),
		why:   CloseRequested,
	}
}

// continueLine is the interim answer to Expect: 100-continue.
var continueLine = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// serve dispatches the complete requests buffered on c, in order, until the
// input runs out or c is blocked. It reports whether it stopped because
// c's pending output is above MaxOutput, the only block pump itself can lift.
//
// serve does no I/O; that keeps it testable on bytes in memory.
func (l *Loop) serve(c *conn) (capped bool) {
	if c.h2 != nil {
		return l.serveGRPC(c)
	}
	for c.open && !c.waiting && !c.closeAfter {
		if c.pending() > l.cfg.MaxOutput {
			return true
		}
		b := c.in[c.r:]
		if c.f.next == 0 {
			// Empty lines before a request are ignored (RFC 9112
			// §2.2): some clients send CRLF after a body.
			for len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
				b = b[2:]
				c.r += 2
			}
			if len(b) == 0 || len(b) == 1 && b[0] == '\r' {
				c.reqStart = 0
				return false
			}
		}
		if c.reqStart == 0 {
			c.reqStart = l.now
		}
		switch v := c.f.scan(b, l.cfg.MaxHeaderBytes, l.cfg.MaxBodyBytes); v {
		case needMore:
			return false
		case complete:
		default:
			l.refuse(c, problemFor(v))
			return false
		}
		head, total := c.f.head, c.f.head+c.f.body
		if len(b) < total {
			l.awaitBody(c, total)
			return false
		}
		// Consume before dispatching: the handler may defer, and the
		// connection must then resume after this request.
		c.r += total
		c.f = framer{}
		c.continued = false
		c.reqStart = 0
		l.dispatch(c, b[:head], b[head:total])
	}
	return false
}

// awaitBody makes room for a request of total bytes whose head is complete,
// and tells a client that asked whether to send its body to go ahead.
func (l *Loop) awaitBody(c *conn, total int) {
	if c.r+total > cap(c.in) {
		if total <= cap(c.in) {
			n := copy(c.in, c.in[c.r:])
			c.in, c.r = c.in[:n], 0
		} else {
			// A body larger than the pooled buffers gets a buffer of
			// exactly its size; it is dropped when consumed.
			b := make([]byte, len(c.in)-c.r, total)
			copy(b, c.in[c.r:])
			l.bufs.put(c.in)
			c.in, c.r = b, 0
		}
	}
	if c.f.expect && !c.continued {
		c.continued = true
		l.appendOut(c, continueLine)
	}
}

// dispatch parses one complete request, runs the handler and writes its
// response (unless deferred). head includes the blank line.
func (l *Loop) dispatch(c *conn, head, body []byte) {
	req := &l.req
	l.head.Reset(head)
	l.br.Reset(&l.head)
	if err := req.Header.Read(l.br); err != nil || !agrees(req, len(body)) {
		req.Reset()
		l.refuse(c, problemMalformed)
		return
	}
	if len(body) > 0 {
		req.SetBodyRaw(body)
	}
	x := &l.ctx
	*x = Ctx{Request: req, Response: &l.resp, Now: l.now, ConnID: c.id, loop: l, conn: c}
	l.cnt.v[statRequests]++
	l.handler(x)
	if x.deferred == 0 {
		a := requestAnswer(req)
		l.respond(c, &l.resp, a)
	}
	*x = Ctx{}
	l.resp.Reset()
	req.Reset()
}

// agrees checks that fasthttp framed the request as the framer did.
func agrees(req *fasthttp.Request, body int) bool {
	n := req.Header.ContentLength()
	return n == body || n < 0 && body == 0
}

// refuse answers a problem and, if it is fatal to the connection, drops the
// rest of the input, whose framing is now unknown.
func (l *Loop) refuse(c *conn, p *problem) {
	a := answer{close: p.close, why: CloseBadRequest}
	if p == problemTimeout {
		a.why = CloseReadTimeout
	}
	if p.close {
		c.r = len(c.in)
		c.f = framer{}
		c.reqStart = 0
	}
	p.fill(&l.aux)
	l.respond(c, &l.aux, a)
	l.aux.Reset()
}

// respond serialises resp onto c's output.
func (l *Loop) respond(c *conn, resp *fasthttp.Response, a answer) {
	if a.head {
		resp.SkipBody = true
	}
	if resp.Header.ConnectionClose() && !a.close {
		a.close, a.why = true, CloseRequested
	}
	if l.draining && !a.close {
		a.close, a.why = true, CloseDrain
	}
	switch {
	case a.close:
		resp.Header.SetConnectionClose()
		c.closeAfter, c.closeWhy = true, a.why
	case a.http10:
		resp.Header.Set(fasthttp.HeaderConnection, "keep-alive")
	}
	if c.out == nil {
		c.out = l.bufs.get()
	}
	if c.pending() == 0 {
		c.writeSince = l.now
	}
	before := len(c.out)
	l.ow.c = c
	err := resp.Write(l.bw)
	if err == nil {
		err = l.bw.Flush()
	}
	l.ow.c = nil
	if err != nil {
		// Only a body stream can fail here; what was written is not a
		// whole response, so nothing may follow it.
		l.bw.Reset(&l.ow)
		c.closeAfter, c.closeWhy = true, CloseError
	}
	l.cnt.v[statOutput] += uint64(len(c.out) - before)
	c.lastActive = l.now
}
