//go:build linux

package httploop

import (
	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/h2"
)

// conn is one client connection. Only the loop thread touches it.
//
// Input is in[r:]: bytes received and not yet consumed, beginning with the
// request being framed (f). Output is out[w:]: bytes answered and not yet
// written. Both buffers come from the loop's pool and go back to it whenever
// they empty, so an idle keep-alive connection holds no buffer at all.
type conn struct {
	fd   int
	slot uint32
	gen  uint32 // bumped at close: events and ready entries of an earlier occupant are ignored
	id   uint64 // ConnID, unique within the loop

	in  []byte
	r   int
	f   framer
	out []byte
	w   int

	reqStart    int64 // when the request at in[r:] was first seen; 0 when none is
	lastActive  int64 // accept or last answer; the idle clock
	writeSince  int64 // last write progress while output was pending
	deferStart  int64
	lingerUntil int64
	lingered    int // bytes discarded while lingering

	deferSeq  uint64 // sequence of the outstanding deferred answer (when waiting)
	deferMode answer // how to write it

	open       bool
	readable   bool  // no read since the last readiness edge ended in EAGAIN: input may be waiting
	rdhup      bool  // the peer has shut its side; read until EOF
	peerDone   bool  // read returned EOF
	waiting    bool  // a deferred answer is outstanding; nothing after it is dispatched
	closeAfter bool  // close once the output is written
	lingering  bool  // our side is shut; waiting for the peer's FIN
	queued     bool  // in the ready list
	sendQueued bool  // in the send list: its output goes out with the iteration's batch
	full       bool  // a write found the socket full; until EPOLLOUT, output is written, not batched
	continued  bool  // 100 Continue sent for the current request
	goingAway  bool  // gRPC: the drain's first GOAWAY is sent
	goAwayDue  int64 // when the final GOAWAY goes out, unless the client's ACK brings it first
	closeWhy   CloseReason

	// h2 frames a gRPC connection's input (grpc.go); nil on HTTP/1.1
	// connections.
	h2 *h2.Conn
}

// pending is how much output waits for the socket.
func (c *conn) pending() int {
	return len(c.out) - c.w
}

// maxReadsPerPump bounds the reads one connection gets per turn, so a client
// streaming pipelined requests cannot starve the others; it is queued to
// continue in the next iteration instead.
const maxReadsPerPump = 8

// pump moves c forward as far as it can without blocking: dispatch what is
// buffered, write what is answered, read more, until c runs out of input,
// is blocked (deferred answer outstanding, output above MaxOutput, closing),
// or has had its turn.
func (l *Loop) pump(c *conn) {
	if c.lingering {
		l.discard(c)
		return
	}
	for reads := 0; ; {
		capped := l.serve(c)
		if !c.open {
			return
		}
		if c.pending() > 0 {
			if l.ring != nil && !c.full {
				l.queueSend(c)
			} else if !l.flush(c) {
				return
			}
		}
		if c.waiting || c.closeAfter || c.pending() > l.cfg.MaxOutput {
			break // EPOLLOUT or Complete resumes it
		}
		if capped {
			continue // output drained below the cap: dispatch the rest
		}
		if !c.readable {
			break
		}
		if reads == maxReadsPerPump {
			l.queue(c)
			break
		}
		reads++
		if !l.read(c) {
			return
		}
	}
	l.settle(c)
}

// settle decides what becomes of c once pump can do no more.
func (l *Loop) settle(c *conn) {
	if c.pending() > 0 {
		return // EPOLLOUT brings it back
	}
	switch {
	case c.closeAfter:
		l.linger(c)
		return
	case c.waiting:
		return
	case c.peerDone:
		// Everything the client sent before its FIN is answered; what is
		// left is a request that can no longer complete.
		l.close(c, ClosePeer)
		return
	}
	if c.r == len(c.in) {
		l.bufs.put(c.in)
		c.in, c.r = nil, 0
		c.reqStart = 0
		// A gRPC connection stays until its final GOAWAY is out and its
		// streams are answered: h2 then reports Closing, and the last
		// answer's pump closes it.
		if l.draining && (c.h2 == nil || c.h2.Refusing() && c.h2.Streams() == 0) {
			l.close(c, CloseDrain)
		}
	}
}

// read reads once into c's input buffer and reports whether c is still open.
func (l *Loop) read(c *conn) bool {
	if c.in == nil {
		c.in = l.bufs.get()
	}
	if len(c.in) == cap(c.in) {
		if c.r == 0 && c.h2 != nil {
			// The buffer holds a whole frame of the largest size
			// (minGRPCReadBuffer) and Step consumes every whole frame:
			// a guard, not a path.
			l.close(c, CloseBadRequest)
			return false
		}
		if c.r == 0 {
			// serve refuses a head that fills a buffer and sizes the
			// buffer to a body, so a full buffer has something to
			// consume; this is a guard, not a path.
			l.refuse(c, problemHeaderTooLarge)
			return c.open
		}
		n := copy(c.in, c.in[c.r:])
		c.in, c.r = c.in[:n], 0
	}
	space := cap(c.in) - len(c.in)
	n, err := rawRead(c.fd, c.in[len(c.in):cap(c.in)])
	switch {
	case n > 0:
		c.in = c.in[:len(c.in)+n]
		l.cnt.v[statBytesIn] += uint64(n)
		// A short read emptied the socket's queue, and any byte arriving
		// later raises a new edge, so skip the read that would only say
		// EAGAIN. Unless the peer has shut its side: its FIN came with
		// the edge already seen, and only reading on finds it.
		if n < space && !c.rdhup {
			c.readable = false
		}
	case err == nil:
		c.peerDone, c.readable = true, false
	case err == unix.EAGAIN:
		c.readable = false
	case err == unix.EINTR:
	case err == unix.ECONNRESET:
		l.close(c, ClosePeer)
		return false
	default:
		l.close(c, CloseError)
		return false
	}
	return true
}

// flush writes c's pending output until done or the socket is full, and
// reports whether c is still open.
func (l *Loop) flush(c *conn) bool {
	for c.w < len(c.out) {
		n, err := rawWrite(c.fd, c.out[c.w:])
		if n > 0 {
			c.w += n
			c.writeSince = l.now
			l.cnt.v[statBytesOut] += uint64(n)
			l.cnt.v[statOutput] -= uint64(n)
			continue
		}
		switch err {
		case unix.EAGAIN:
			// The edge for writability comes when the peer reads.
			c.full = true
			// Reclaim what is written once it is the larger part, so
			// a connection that never fully drains does not grow.
			if c.w > cap(c.out)/2 {
				m := copy(c.out, c.out[c.w:])
				c.out, c.w = c.out[:m], 0
			}
			return true
		case unix.EINTR:
		case unix.EPIPE, unix.ECONNRESET:
			l.close(c, ClosePeer)
			return false
		default:
			l.close(c, CloseError)
			return false
		}
	}
	l.bufs.put(c.out)
	c.out, c.w = nil, 0
	c.full = false
	return true
}

// queueSend puts c's output in the iteration's send batch (sendQueued).
func (l *Loop) queueSend(c *conn) {
	if !c.sendQueued {
		c.sendQueued = true
		l.sendq = append(l.sendq, ref{c.slot, c.gen})
	}
}

// sendQueued sends the output of every connection in the send list, in
// submissions of at most the ring's size, and then pumps each of them on:
// what a send left (a full socket, an error) is written as without a
// ring, and a connection resumed by its answer reads and serves again.
// Connections queued while the list runs are sent in the next iteration,
// which then does not sleep.
func (l *Loop) sendQueued() {
	list := l.sendq
	l.sendq = l.sendSpare[:0]
	for start := 0; start < len(list) && l.ring != nil; {
		batch := l.sendBatch[:0]
		for ; start < len(list) && len(batch) < int(l.ring.entries); start++ {
			r := list[start]
			c := l.conns[r.slot]
			if !c.open || c.gen != r.gen || !c.sendQueued {
				continue
			}
			c.sendQueued = false
			if c.pending() > 0 {
				batch = append(batch, c)
			}
		}
		if len(batch) > 0 {
			l.submitSends(batch)
		}
	}
	// Without a ring (it failed above), what is left is written directly.
	for _, r := range list {
		if c := l.conns[r.slot]; c.open && c.gen == r.gen && c.sendQueued {
			c.sendQueued = false
			l.pump(c)
		}
	}
	l.sendSpare = list[:0]
}

// submitSends sends batch through the ring and carries on with each
// connection. If the ring fails, which of the batch's bytes reached their
// sockets is unknown: those connections are closed (a client sees a
// dropped connection, never a repeated or torn answer) and the loop writes
// every answer itself from then on.
func (l *Loop) submitSends(batch []*conn) {
	res := l.sendRes[:len(batch)]
	if err := l.ring.send(batch, res); err != nil {
		l.ring.close()
		l.ring = nil
		for _, c := range batch {
			if c.open {
				l.close(c, CloseError)
			}
		}
		return
	}
	l.cnt.v[statSendBatches]++
	l.cnt.v[statBatchedSends] += uint64(len(batch))
	for i, c := range batch {
		if !c.open {
			continue
		}
		if n := res[i]; n > 0 {
			c.w += int(n)
			c.writeSince = l.now
			l.cnt.v[statBytesOut] += uint64(n)
			l.cnt.v[statOutput] -= uint64(n)
		}
		// flush finishes what the send did not (or only releases the
		// buffer), meeting a full socket or an error as it always does.
		if !l.flush(c) {
			continue
		}
		l.pump(c)
	}
}

// appendOut queues raw bytes for c (an interim 100 Continue).
func (l *Loop) appendOut(c *conn, b []byte) {
	if c.out == nil {
		c.out = l.bufs.get()
	}
	if c.pending() == 0 {
		c.writeSince = l.now
	}
	c.out = append(c.out, b...)
	l.cnt.v[statOutput] += uint64(len(b))
}

// linger shuts our side of c after its last answer and waits, up to
// lingerTimeout, for the client's FIN before closing. Closing at once with
// input unread would make the kernel reset the connection, and a reset can
// overtake the answer still in flight.
func (l *Loop) linger(c *conn) {
	if c.peerDone {
		l.close(c, c.closeWhy) // the FIN is here: nothing left unread
		return
	}
	_ = unix.Shutdown(c.fd, unix.SHUT_WR)
	c.lingering = true
	c.lingerUntil = l.now + int64(lingerTimeout)
	c.reqStart = 0
	l.bufs.put(c.in)
	c.in, c.r = nil, 0
	c.readable = true
	l.discard(c)
}

// discard reads and drops a lingering connection's input until the socket is
// empty, closing it at EOF, on error, or past lingerBytes.
func (l *Loop) discard(c *conn) {
	for c.readable {
		n, err := unix.Read(c.fd, l.scratch)
		switch {
		case n > 0:
			l.cnt.v[statBytesIn] += uint64(n)
			c.lingered += n
			if c.lingered > lingerBytes {
				l.close(c, c.closeWhy)
				return
			}
		case err == nil:
			l.close(c, c.closeWhy)
			return
		case err == unix.EAGAIN:
			c.readable = false
		case err == unix.EINTR:
		default:
			l.close(c, c.closeWhy)
			return
		}
	}
}

// close closes c's socket and returns its slot. A deferred answer still
// outstanding is abandoned: its Complete finds the slot's sequence changed.
func (l *Loop) close(c *conn, why CloseReason) {
	unix.Close(c.fd) // also removes it from the epoll set
	l.cnt.v[statOutput] -= uint64(c.pending())
	l.bufs.put(c.in)
	l.bufs.put(c.out)
	l.releaseGRPC(c)
	*c = conn{slot: c.slot, gen: c.gen + 1}
	l.free = append(l.free, c.slot)
	l.nconns--
	l.cnt.v[statConns]--
	l.cnt.v[statClosed+int(why)]++
}

// outWriter appends what fasthttp writes to the connection it points at.
type outWriter struct {
	c *conn
}

func (w *outWriter) Write(p []byte) (int, error) {
	w.c.out = append(w.c.out, p...)
	return len(p), nil
}

// maxPooled bounds the idle buffers a loop keeps: after a burst of slow
// clients the excess goes back to the garbage collector.
const maxPooled = 1024

// bufPool is a free list of equal-sized buffers, loop thread only. Buffers of
// any other capacity (grown for a large body or response) are not kept.
type bufPool struct {
	size int
	free [][]byte
}

func (p *bufPool) get() []byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	return make([]byte, 0, p.size)
}

func (p *bufPool) put(b []byte) {
	if cap(b) == p.size && len(p.free) < maxPooled {
		p.free = append(p.free, b[:0])
	}
}
