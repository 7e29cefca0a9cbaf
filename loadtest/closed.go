package loadtest

import (
	"bufio"
	"net"
)

// runClosed drives a connection in closed loop: keep Pipeline requests in
// flight, send the next one as soon as a response frees a slot. One
// goroutine does both sides, since nothing is ever due while it waits for a
// response; that saves a goroutine handoff per request, which matters when
// the generator has a single CPU to match the server's.
func (c *conn) runClosed() {
	for {
		nc := c.dial()
		if nc == nil {
			return
		}
		done := c.closedSession(nc)
		c.closeSocket()
		c.freeAll()
		if done {
			return
		}
	}
}

// closedSession runs until the run stops (true) or the socket fails
// (false; the caller reconnects).
func (c *conn) closedSession(nc net.Conn) (done bool) {
	br := bufio.NewReaderSize(nc, ioBufferSize)
	bw := bufio.NewWriterSize(nc, ioBufferSize)
	depth := c.r.opts.Pipeline
	fifo := make([]*op, 0, depth) // requests in flight, oldest first

	fail := func(class string) bool {
		for _, o := range fifo {
			c.lost(class, o.start)
		}
		return c.r.stopping()
	}

	for {
		now := c.r.now()
		// The end is checked by time as well as by the stop channel, so no
		// request is started after the end but before the timer fires.
		if !c.r.stopping() && now < c.r.end.Load() {
			for len(fifo) < depth {
				o := c.newOp(now)
				if err := c.write(bw, o); err != nil {
					fifo = append(fifo, o)
					return fail(errWrite)
				}
				fifo = append(fifo, o)
			}
		}
		if len(fifo) == 0 {
			return true
		}
		if bw.Buffered() > 0 {
			if err := bw.Flush(); err != nil {
				return fail(errWrite)
			}
		}
		// Read every response already buffered before writing again, so
		// that a pipelined batch is answered by a batch.
		for {
			if class := c.readResponse(nc, br); class != "" {
				return fail(class)
			}
			o := fifo[0]
			copy(fifo, fifo[1:])
			fifo = fifo[:len(fifo)-1]
			now = c.r.now()
			if c.recv.handle(o, now-o.due, c.r.measured(o.start)) {
				o.due = now
				fifo = append(fifo, o)
				if err := c.write(bw, o); err != nil {
					return fail(errWrite)
				}
			} else {
				c.release(o)
			}
			if c.recv.resp.ConnectionClose() {
				return fail(errClosed)
			}
			if br.Buffered() == 0 || len(fifo) == 0 {
				break
			}
		}
	}
}
