package loadtest

import (
	"bufio"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

const ioBufferSize = 16 << 10

// conn is one load-generating connection. It survives reconnects: the
// schedule position and the recorder carry over, the socket does not.
type conn struct {
	r    *run
	id   int
	rec  *recorder
	send sendState
	recv recvState
	wbuf []byte
	ops  []op
	free []*op
	wake chan struct{} // open loop: the pacer says a send is due
	j    int64         // open loop: next index in this connection's schedule
	// missed counts open-loop sends that were due in the measured window
	// but never written because the run ended first.
	missed int64

	mu sync.Mutex
	nc net.Conn // current socket, for the hard stop

	deadlineSet int64 // when the read deadline was last pushed forward
}

func newConn(r *run, id int) *conn {
	c := &conn{
		r:    r,
		id:   id,
		rec:  newRecorder(r.hists[id%len(r.hists)]),
		wake: make(chan struct{}, 1),
		ops:  make([]op, r.opts.Pipeline),
	}
	c.recv.rec = c.rec
	c.send = sendState{
		rng:      rand.New(rand.NewPCG(r.opts.Seed, uint64(id))),
		picker:   r.picker,
		accounts: r.accounts,
		conn:     id,
	}
	c.freeAll()
	return c
}

// freeAll returns every op to the free list; used when a socket dies and
// takes its in-flight operations with it.
func (c *conn) freeAll() {
	c.free = c.free[:0]
	for i := range c.ops {
		c.free = append(c.free, &c.ops[i])
	}
}

func (c *conn) newOp(due int64) *op {
	o := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	o.scenario = c.r.chooser.pick(c.send.rng)
	o.next = firstKind(o.scenario)
	o.account = c.r.picker.Pick(c.send.rng)
	o.start = due
	o.due = due
	return o
}

func (c *conn) release(o *op) { c.free = append(c.free, o) }

func (c *conn) write(bw *bufio.Writer, o *op) error {
	c.wbuf = c.r.enc.appendRequest(c.wbuf[:0], o, &c.send)
	_, err := bw.Write(c.wbuf)
	return err
}

// dial connects, retrying with a short pause until it succeeds or the run
// stops. Each failed attempt counts as one transport error so that a dead
// target fails the run instead of reporting nothing.
func (c *conn) dial() net.Conn {
	d := net.Dialer{Timeout: c.r.opts.Timeout}
	for {
		if c.r.stopping() {
			return nil
		}
		nc, err := d.DialContext(c.r.hardCtx, "tcp", c.r.target.Addr)
		if err == nil {
			c.mu.Lock()
			if c.r.isHard() {
				c.mu.Unlock()
				nc.Close()
				return nil
			}
			c.nc = nc
			c.deadlineSet = 0
			c.mu.Unlock()
			return nc
		}
		now := c.r.now()
		c.rec.transportErr(errConnect, 1, c.r.measured(now))
		select {
		case <-time.After(50 * time.Millisecond):
		case <-c.r.stop:
		}
	}
}

func (c *conn) closeSocket() {
	c.mu.Lock()
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
	c.mu.Unlock()
}

// hardStop unblocks whatever the connection's goroutines are doing on the
// socket; they see the hard stop and exit.
func (c *conn) hardStop() {
	c.mu.Lock()
	if c.nc != nil {
		c.nc.SetDeadline(time.Unix(1, 0))
	}
	c.mu.Unlock()
}

// armRead keeps a read deadline about Timeout ahead. Pushing it forward on
// every response would cost a timer update each; pushing it only when an
// eighth of the timeout has passed bounds the error to 1/8.
func (c *conn) armRead(nc net.Conn, now int64) {
	to := int64(c.r.opts.Timeout)
	if c.deadlineSet != 0 && now-c.deadlineSet < to/8 {
		return
	}
	c.deadlineSet = now
	// Under mu, like hardStop, which runs after r.hard is closed: a deadline
	// set here can then never overwrite the hard stop's past deadline.
	c.mu.Lock()
	if !c.r.isHard() {
		nc.SetReadDeadline(c.r.start.Add(time.Duration(now + to)))
	}
	c.mu.Unlock()
}

// readResponse reads one response into c.recv.resp. On failure it returns
// the error class, else "". The first byte is peeked separately so that a
// dead or timed-out socket is told apart from a malformed response.
func (c *conn) readResponse(nc net.Conn, br *bufio.Reader) (failure string) {
	if br.Buffered() == 0 {
		c.armRead(nc, c.r.now())
		if _, err := br.Peek(1); err != nil {
			return classifyReadErr(err)
		}
	}
	if err := c.recv.resp.ReadLimitBody(br, maxBodySize); err != nil {
		return classifyReadErr(err)
	}
	return ""
}

// lost accounts for a request, of an operation that started at start, that
// got no response. After a hard stop it is either abandoned (the user
// interrupted) or timed out (the server did not answer within the drain).
func (c *conn) lost(class string, start int64) {
	if c.r.isHard() {
		if c.r.interrupted.Load() {
			c.rec.abandoned++
			return
		}
		class = errTimeout
	}
	c.rec.transportErr(class, 1, c.r.measured(start))
}
