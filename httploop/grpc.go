//go:build linux

package httploop

import (
	"errors"
	"time"

	"github.com/tollgated/tollgated/h2"
)

// A loop may serve a second listener whose connections speak HTTP/2 with
// prior knowledge, as gRPC clients do (Config.GRPC). Such a connection is
// a conn like any other — same slots, buffers, readiness, output bound,
// write timeout and lingering close — whose input is framed by an h2.Conn
// instead of the HTTP/1.1 framer, and whose requests are the messages of
// its streams, handed to GRPC.Handler one at a time on the loop thread.
//
// Many streams are in flight on one connection, so an answer the handler
// cannot give at once is not a deferral of the connection, as an HTTP/1.1
// answer is: the handler keeps the stream's StreamRef and answers it later
// (Loop.Answer, Fail, Send, Finish), while the connection goes on reading
// and dispatching its other streams. How long such an answer may wait is
// the handler's to bound; the h2.Conn bounds how many streams wait.

// GRPC is a loop's gRPC listener and what serves it.
type GRPC struct {
	// Listener is the gRPC address's socket, open, which the loop takes
	// over as it takes over its HTTP listener.
	Listener *Listener
	// H2 bounds each connection (streams, message and header sizes).
	H2 h2.Config
	// Handler serves each message, and each end of a client's side of a
	// stream, on the loop thread. It must not block.
	Handler StreamHandler
	// MaxConns bounds the gRPC connections this loop holds, within the
	// loop's MaxConns: one accepted beyond it is closed at once and
	// counted as Rejected. Zero: only the loop's bound.
	MaxConns int
}

// StreamHandler serves one event of a gRPC stream.
type StreamHandler func(x *StreamCtx)

// StreamCtx is what a StreamHandler gets. It and what it points to are
// valid only until the handler returns: a handler that answers later
// keeps Ref and copies what it needs from Request.
type StreamCtx struct {
	// Event is h2.Message (Request.Message holds it) or h2.HalfClosed
	// (the client ended its side after the messages already delivered).
	Event   h2.Event
	Request *h2.Request
	Ref     StreamRef
	// Now is the iteration's clock reading, Unix nanoseconds.
	Now    int64
	ConnID uint64
}

// StreamRef names a stream of a gRPC connection of this loop. A reference
// outliving its connection is recognised (the slot's generation moved on)
// and its answers are dropped.
type StreamRef struct {
	slot, gen, stream uint32
}

// Stream is the HTTP/2 stream id r names.
func (r StreamRef) Stream() uint32 { return r.stream }

// DetachedStreamRef names stream on no connection of any loop (a loop's
// answers to it report false): for a StreamHandler's tests without a
// loop.
func DetachedStreamRef(stream uint32) StreamRef { return StreamRef{slot: ^uint32(0), stream: stream} }

// minGRPCReadBuffer is the smallest input buffer a gRPC connection can be
// framed in: a frame of the largest size a client may send (16 KiB of
// payload, the default SETTINGS_MAX_FRAME_SIZE the server keeps) and its
// 9-byte header, framed in place.
const minGRPCReadBuffer = 16<<10 + 9

func (g *GRPC) validate() error {
	switch {
	case g.Listener == nil || g.Listener.fd < 0:
		return errors.New("httploop: the gRPC listener is closed or already owned by a loop")
	case !g.Listener.open:
		return errors.New("httploop: the gRPC listener is bound but not open (call Open first)")
	case g.Handler == nil:
		return errors.New("httploop: nil gRPC StreamHandler")
	case g.MaxConns < 0:
		return errors.New("httploop: negative gRPC connection bound")
	}
	return g.H2.Validate()
}

// openGRPC makes c, just accepted from the gRPC listener, an HTTP/2
// connection: it takes an h2.Conn from the pool and queues the server's
// preface, which goes out with c's first pump.
func (l *Loop) openGRPC(c *conn) {
	if n := len(l.h2free); n > 0 {
		c.h2 = l.h2free[n-1]
		l.h2free = l.h2free[:n-1]
	} else {
		c.h2 = h2.NewConn(&l.cfg.GRPC.H2)
	}
	l.ngrpc++
	l.outBuffer(c)
	before := len(c.out)
	c.out = c.h2.Start(c.out)
	l.cnt.v[statOutput] += uint64(len(c.out) - before)
	l.queue(c)
}

// releaseGRPC returns c's h2.Conn to the pool as c closes.
func (l *Loop) releaseGRPC(c *conn) {
	if c.h2 == nil {
		return
	}
	l.ngrpc--
	c.h2.Reset()
	if len(l.h2free) < maxPooled {
		l.h2free = append(l.h2free, c.h2)
	}
	c.h2 = nil
}

// outBuffer gives c an output buffer if it has none, and starts its write
// clock when nothing was pending.
func (l *Loop) outBuffer(c *conn) {
	if c.out == nil {
		c.out = l.bufs.get()
	}
	if c.pending() == 0 {
		c.writeSince = l.now
	}
}

// serveGRPC frames the input buffered on c and dispatches its streams'
// events, in order, until the input runs out or c is blocked. It reports,
// as serve does, whether it stopped because c's output is above
// MaxOutput. Like serve it does no I/O.
func (l *Loop) serveGRPC(c *conn) (capped bool) {
	if l.draining {
		l.goAway(c)
	}
	for c.open && !c.closeAfter {
		if c.pending() > l.cfg.MaxOutput {
			return true
		}
		l.outBuffer(c)
		before := len(c.out)
		n, out, ev := c.h2.Step(c.in[c.r:], c.out)
		c.out = out
		l.cnt.v[statOutput] += uint64(len(c.out) - before)
		c.r += n
		if n > 0 {
			c.lastActive = l.now
		}
		switch ev {
		case h2.NeedMore:
			// A partial frame starts the read clock; the body timeout
			// bounds how long one may take to arrive whole.
			if c.r < len(c.in) {
				if c.reqStart == 0 {
					c.reqStart = l.now
				}
			} else {
				c.reqStart = 0
			}
			return false
		case h2.Closing:
			c.closeAfter, c.closeWhy = true, CloseBadRequest
			if c.goingAway || c.peerDone {
				c.closeWhy = CloseDrain
			}
			c.r, c.reqStart = len(c.in), 0
			return false
		case h2.Message, h2.HalfClosed:
			c.reqStart = 0
			l.dispatchStream(c, ev)
		default:
			panic("httploop: BUG: h2.Conn.Step returned an unknown event")
		}
	}
	return false
}

// goAwayGrace is how long a drain waits for a client to acknowledge its
// first GOAWAY (h2.Conn.GoAway's PING) before sending the final one anyway:
// at most, for it never takes more than half the drain's time left.
const goAwayGrace = int64(time.Second)

// goAway drains c in h2.Conn.GoAway's two steps: the first GOAWAY when the
// drain reaches c, the final one once goAwayDue passes, unless the
// client's ACK has brought it meanwhile. A drain with no time left sends
// both at once.
func (l *Loop) goAway(c *conn) {
	if !c.goingAway {
		c.goingAway = true
		c.goAwayDue = l.now + min(goAwayGrace, max(l.drainAt.Load()-l.now, 0)/2)
		l.writeGoAway(c)
	}
	if !c.h2.Refusing() && l.now >= c.goAwayDue {
		l.writeGoAway(c)
	}
}

func (l *Loop) writeGoAway(c *conn) {
	l.outBuffer(c)
	before := len(c.out)
	c.out = c.h2.GoAway(c.out)
	l.sent(c, before)
}

// dispatchStream runs the gRPC handler over the event Step just returned.
func (l *Loop) dispatchStream(c *conn, ev h2.Event) {
	req := c.h2.Request()
	x := &l.sctx
	*x = StreamCtx{Event: ev, Request: req, Ref: StreamRef{c.slot, c.gen, req.Stream}, Now: l.now, ConnID: c.id}
	if ev == h2.Message {
		l.cnt.v[statRequests]++
	}
	l.serving = c
	l.cfg.GRPC.Handler(x)
	l.serving = nil
	*x = StreamCtx{}
}

// streamConn is the open gRPC connection r names, or nil.
func (l *Loop) streamConn(r StreamRef) *conn {
	if r.slot >= uint32(len(l.conns)) {
		return nil
	}
	c := l.conns[r.slot]
	if !c.open || c.gen != r.gen || c.h2 == nil || c.lingering {
		return nil
	}
	return c
}

// Answer answers r's unary call with msg (grpc-status 0). It reports
// false when r's connection is gone; a stream the client reset is still
// released by it (the h2.Conn counts it until then) and reports true.
// Call it on the loop thread, from a handler or later.
func (l *Loop) Answer(r StreamRef, msg []byte) bool { return l.writeStream(r, writeAnswer, msg, 0, "") }

// Fail ends r with a gRPC status and message and no answer message, as
// Answer does.
func (l *Loop) Fail(r StreamRef, code uint32, msg string) bool {
	return l.writeStream(r, writeEnd, nil, code, msg)
}

// Send sends one message of a streaming answer on r; the stream stays
// open until Finish.
func (l *Loop) Send(r StreamRef, msg []byte) bool { return l.writeStream(r, writeSend, msg, 0, "") }

// Finish ends r's streaming answer with a gRPC status.
func (l *Loop) Finish(r StreamRef, code uint32, msg string) bool {
	return l.writeStream(r, writeEnd, nil, code, msg)
}

// streamWrite is what writeStream writes.
type streamWrite uint8

const (
	writeAnswer streamWrite = iota // a unary answer
	writeSend                      // a message of a streaming answer
	writeEnd                       // the status ending a stream (h2's Fail is its Finish)
)

// writeStream writes w on r's stream, as Answer, Send, Fail and Finish
// say.
func (l *Loop) writeStream(r StreamRef, w streamWrite, msg []byte, code uint32, text string) bool {
	c := l.streamConn(r)
	if c == nil {
		return false
	}
	l.outBuffer(c)
	before := len(c.out)
	switch w {
	case writeAnswer:
		c.out = c.h2.Answer(c.out, r.stream, msg)
	case writeSend:
		c.out = c.h2.Send(c.out, r.stream, msg)
	default:
		c.out = c.h2.Finish(c.out, r.stream, code, text)
	}
	l.sent(c, before)
	return true
}

// StreamLive reports whether r still waits for (more of) its answer.
func (l *Loop) StreamLive(r StreamRef) bool {
	c := l.streamConn(r)
	return c != nil && c.h2.Live(r.stream)
}

// sent accounts for what an answer appended to c's output since before,
// and gets it written: by the pump serving c, or by one queued for it.
func (l *Loop) sent(c *conn, before int) {
	l.cnt.v[statOutput] += uint64(len(c.out) - before)
	c.lastActive = l.now
	if c != l.serving {
		l.queue(c)
	}
}

// checkGRPC enforces a gRPC connection's deadlines, beside the write
// timeout every connection has: a frame begun must arrive whole within
// BodyTimeout, and a connection on which nothing happened for
// IdleTimeout is closed, streams or not — an answer the handler holds is
// due well within it, so what is left is a client's stream that never
// sent its message.
func (l *Loop) checkGRPC(c *conn) {
	now := l.now
	switch {
	case c.closeAfter:
		return
	case c.goingAway && !c.h2.Refusing() && now >= c.goAwayDue:
		l.queue(c) // the client has not acknowledged the first GOAWAY
	case c.reqStart != 0 && now-c.reqStart >= int64(l.cfg.BodyTimeout):
		l.close(c, CloseReadTimeout)
	case c.pending() == 0 && now-c.lastActive >= int64(l.cfg.IdleTimeout):
		l.close(c, CloseIdle)
	}
}
