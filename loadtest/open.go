package loadtest

import (
	"bufio"
	"net"
	"sync"
)

// event is what the reader tells the writer after a response: the op has
// another request to send (more) or is over and frees its slot.
type event struct {
	o    *op
	more bool
}

// session is one socket's worth of an open-loop connection: a writer (the
// connection's own goroutine) and a reader goroutine.
type session struct {
	nc       net.Conn
	inflight chan *op   // written, awaiting a response, oldest first
	events   chan event // reader -> writer
	broken   chan struct{}
	once     sync.Once
	readDone chan struct{}
	// failClass is why the reader stopped; written by the reader before
	// readDone is closed, read by the writer after.
	failClass string
}

func (s *session) breakOff() {
	s.once.Do(func() {
		close(s.broken)
		s.nc.Close()
	})
}

// runOpen drives a connection in open loop. Connection i of C owns sends
// i, i+C, i+2C, … of the global schedule (send k is due at k/rate), so the
// connections together hold the rate. A send is written when it is due and
// the pipeline has room; if the pipeline is full it waits, and the wait is
// part of its latency because latency is measured from the due time.
func (c *conn) runOpen() {
	for {
		nc := c.dial()
		if nc == nil {
			break
		}
		done := c.openSession(nc)
		c.closeSocket()
		c.freeAll()
		if done {
			break
		}
	}
	c.countMissed()
}

func (c *conn) openSession(nc net.Conn) (done bool) {
	depth := c.r.opts.Pipeline
	s := &session{
		nc:       nc,
		inflight: make(chan *op, depth),
		events:   make(chan event, depth),
		broken:   make(chan struct{}),
		readDone: make(chan struct{}),
	}
	go c.readLoop(s)

	bw := bufio.NewWriterSize(nc, ioBufferSize)
	active := 0
	var ready []*op // ops whose next request is due now
	writeClass := ""

	apply := func(ev event) {
		if ev.more {
			ready = append(ready, ev.o)
		} else {
			active--
			c.release(ev.o)
		}
	}
	write := func(o *op) bool {
		// Queue before writing: bufio may flush mid-request, and the reader
		// must know what it is reading.
		s.inflight <- o
		if err := c.write(bw, o); err != nil {
			writeClass = errWrite
			return false
		}
		return true
	}

loop:
	for {
		for drained := false; !drained; {
			select {
			case ev := <-s.events:
				apply(ev)
			default:
				drained = true
			}
		}
		now := c.r.now()
		stopping := c.r.stopping()
		for _, o := range ready {
			if !write(o) {
				break loop
			}
		}
		ready = ready[:0]
		// Start every send that is due, if the pipeline has room. This goes
		// on after the stop for sends due before the end: they belong to
		// the measured window, and the stop timer may fire a moment before
		// their poke. A backlog left at the stop drains until the hard
		// stop; what remains then counts as missed.
		end := c.r.end.Load()
		for active < depth {
			due := c.r.at(int64(c.id) + c.j*int64(len(c.r.conns)))
			if due > now || due >= end {
				break
			}
			c.j++
			active++
			if due >= c.r.warmupEnd {
				// How late the send goes out: the generator's share of the
				// latency, plus any wait for a pipeline slot.
				c.rec.hs.recordLag(now - due)
			}
			if !write(c.newOp(due)) {
				break loop
			}
		}
		if bw.Buffered() > 0 {
			if err := bw.Flush(); err != nil {
				writeClass = errWrite
				break loop
			}
		}
		if stopping && active == 0 {
			done = true
			break
		}
		var stop <-chan struct{}
		if !stopping {
			stop = c.r.stop
		}
		select {
		case ev := <-s.events:
			apply(ev)
		case <-c.wake:
		case <-stop:
		case <-s.broken:
			break loop
		case <-c.r.hard:
			break loop
		}
	}

	s.breakOff()
	<-s.readDone
	class := s.failClass
	if writeClass != "" {
		class = writeClass
	}
	if class == "" {
		class = errClosed
	}
	// Requests written but unanswered die with the socket.
	for n := len(s.inflight); n > 0; n-- {
		o := <-s.inflight
		c.lost(class, o.start)
	}
	return done || c.r.stopping()
}

// readLoop reads responses in order and hands each op back to the writer.
func (c *conn) readLoop(s *session) {
	defer close(s.readDone)
	br := bufio.NewReaderSize(s.nc, ioBufferSize)
	for {
		var o *op
		select {
		case o = <-s.inflight:
		case <-s.broken:
			return
		}
		if class := c.readResponse(s.nc, br); class != "" {
			s.failClass = class
			c.lost(class, o.start)
			s.breakOff()
			return
		}
		now := c.r.now()
		more := c.recv.handle(o, now-o.due, c.r.measured(o.start))
		if more {
			o.due = now
		}
		s.events <- event{o, more}
		if c.recv.resp.ConnectionClose() {
			s.failClass = errClosed
			s.breakOff()
			return
		}
	}
}

// countMissed counts the sends of this connection's schedule that fell in
// the measured window but were never written: the rate was not held.
func (c *conn) countMissed() {
	end := c.r.end.Load()
	stride := int64(len(c.r.conns))
	for {
		due := c.r.at(int64(c.id) + c.j*stride)
		if due >= end {
			return
		}
		if due >= c.r.warmupEnd {
			c.missed++
		}
		c.j++
	}
}
