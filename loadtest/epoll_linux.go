//go:build linux

package loadtest

import (
	"errors"
	"net"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The epoll engine runs a closed-loop run's connections from a few locked OS
// threads, each with its own epoll instance, instead of a goroutine per
// connection. What it saves is the Go scheduler's share of every request:
// with a goroutine per connection each response costs a read that finds the
// socket empty, a park, the runtime's own epoll_wait and a wake-up before
// the read that succeeds. Here one epoll_wait reports many ready sockets,
// each is read once, and every request written in an iteration goes out in
// one write per connection. Reads and writes are raw system calls on
// non-blocking sockets (see httploop/rawio.go for why).
//
// What it cannot save is the kernel: on loopback a write does the peer's
// TCP receive processing and wakes it, so a request costs the client about
// what it costs a bare server (BENCHMARKS.md, "The load generator").

// epollWait bounds how long a worker sleeps in epoll_wait, so that it sees
// the end of the run, the hard stop and its timeouts without a wake-up.
const epollWait = 5 // ms

// redialPause is how long a connection waits after a failed connect.
const redialPause = 50 * time.Millisecond

// econn is one connection driven by an epoll worker.
type econn struct {
	*conn
	idx      int    // in its worker's conns: the epoll token
	fd       int    // -1 while not connected
	rbuf     []byte // input not yet parsed is rbuf[:rlen]
	rlen     int
	out      []byte // output not yet written is out[woff:]
	woff     int
	fifo     []*op // requests written (or queued in out), oldest first
	waiting  bool  // registered for EPOLLOUT: the socket's buffer was full
	progress int64 // last response, or the write that made fifo non-empty
	redialAt int64 // when not connected: when to try again
	answer   answer
}

// epollWorker owns a share of the connections and the thread that drives
// them.
type epollWorker struct {
	r      *run
	epfd   int
	conns  []*econn
	events []unix.EpollEvent
	ev     unix.EpollEvent
	addr   unix.Sockaddr
	family int
}

// runClosedEpoll drives every connection of a closed-loop run, returning
// when the run is over. workers bounds the threads it uses.
func (r *run) runClosedEpoll(workers int) {
	workers = max(1, min(workers, len(r.conns)))
	done := make(chan struct{}, workers)
	for i := range workers {
		w := &epollWorker{r: r, events: make([]unix.EpollEvent, 256)}
		for j := i; j < len(r.conns); j += workers {
			w.conns = append(w.conns, &econn{
				conn: r.conns[j],
				idx:  len(w.conns),
				fd:   -1,
				rbuf: make([]byte, ioBufferSize),
				fifo: make([]*op, 0, r.opts.Pipeline),
			})
		}
		go func() {
			defer func() { done <- struct{}{} }()
			w.run()
		}()
	}
	for range workers {
		<-done
	}
}

func (w *epollWorker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := w.r
	var err error
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		for _, c := range w.conns {
			c.rec.transportErr(errConnect, 1, false)
		}
		return
	}
	defer unix.Close(w.epfd)
	defer func() {
		for _, c := range w.conns {
			w.closeSocket(c)
		}
	}()
	w.resolve()

	for {
		now := r.now()
		if r.isHard() {
			for _, c := range w.conns {
				w.fail(c, errTimeout, now)
			}
			return
		}
		if w.idle(now) {
			return
		}
		w.sweep(now)
		n, err := unix.EpollWait(w.epfd, w.events, epollWait)
		if err != nil && !errors.Is(err, unix.EINTR) {
			for _, c := range w.conns {
				w.fail(c, errProtocol, now)
			}
			return
		}
		now = r.now()
		for _, ev := range w.events[:max(n, 0)] {
			c := w.conns[ev.Fd]
			if c.fd < 0 {
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				w.readable(c, now)
			}
			if c.fd >= 0 && ev.Events&unix.EPOLLOUT != 0 {
				w.flush(c, now)
			}
		}
	}
}

// idle reports whether the run is over for this worker: no new operation
// may start and none is in flight.
func (w *epollWorker) idle(now int64) bool {
	if !w.r.stopping() && now < w.r.end.Load() {
		return false
	}
	for _, c := range w.conns {
		if len(c.fifo) > 0 {
			return false
		}
	}
	return true
}

// sweep reconnects what is due and times out connections whose oldest
// request has waited longer than the timeout for any answer.
func (w *epollWorker) sweep(now int64) {
	to := int64(w.r.opts.Timeout)
	starting := !w.r.stopping() && now < w.r.end.Load()
	for _, c := range w.conns {
		switch {
		case c.fd < 0 && starting && now >= c.redialAt:
			w.connect(c, now)
		case c.fd >= 0 && len(c.fifo) > 0 && now-c.progress > to:
			w.fail(c, errTimeout, now)
		}
	}
}

func (w *epollWorker) resolve() {
	a, err := net.ResolveTCPAddr("tcp", w.r.target.Addr)
	if err != nil {
		return // every connect then fails and is counted
	}
	if ip4 := a.IP.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: a.Port}
		copy(sa.Addr[:], ip4)
		w.addr, w.family = sa, unix.AF_INET
		return
	}
	sa := &unix.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], a.IP.To16())
	w.addr, w.family = sa, unix.AF_INET6
}

// connect opens c's socket. The connect itself blocks, bounded by the
// timeout through SO_SNDTIMEO: it happens once per connection on loopback,
// where it completes at once.
func (w *epollWorker) connect(c *econn, now int64) {
	fail := func(fd int) {
		if fd >= 0 {
			unix.Close(fd)
		}
		c.rec.transportErr(errConnect, 1, w.r.measured(now))
		c.redialAt = now + int64(redialPause)
	}
	if w.addr == nil {
		fail(-1)
		return
	}
	fd, err := unix.Socket(w.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fail(-1)
		return
	}
	tv := unix.NsecToTimeval(int64(w.r.opts.Timeout))
	if unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv) != nil ||
		unix.Connect(fd, w.addr) != nil ||
		unix.SetNonblock(fd, true) != nil ||
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) != nil {
		fail(fd)
		return
	}
	w.ev = unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.idx)}
	if unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &w.ev) != nil {
		fail(fd)
		return
	}
	c.fd = fd
	c.waiting = false
	w.fill(c, now)
	w.flush(c, now)
}

// fill queues new operations until the pipeline is full, unless the run
// is ending.
func (w *epollWorker) fill(c *econn, now int64) {
	if w.r.stopping() || now >= w.r.end.Load() {
		return
	}
	for len(c.fifo) < w.r.opts.Pipeline {
		w.send(c, c.newOp(now), now)
	}
}

func (w *epollWorker) send(c *econn, o *op, now int64) {
	if len(c.fifo) == 0 {
		c.progress = now
	}
	c.out = w.r.enc.appendRequest(c.out, o, &c.send)
	c.fifo = append(c.fifo, o)
}

// readable reads what c's socket holds and answers every complete response.
func (w *epollWorker) readable(c *econn, now int64) {
	if c.rlen == len(c.rbuf) {
		// One response does not fit: grow, within what a response may be.
		if len(c.rbuf) >= maxHeadSize+maxBodySize {
			w.fail(c, errProtocol, now)
			return
		}
		c.rbuf = append(c.rbuf, make([]byte, len(c.rbuf))...)
	}
	n, err := rawIO(unix.SYS_READ, c.fd, c.rbuf[c.rlen:])
	switch {
	case errors.Is(err, unix.EAGAIN):
		return
	case err != nil || n == 0:
		w.fail(c, errClosed, now)
		return
	}
	c.rlen += n
	off := 0
	for off < c.rlen {
		if len(c.fifo) == 0 {
			w.fail(c, errProtocol, now) // an answer to nothing
			return
		}
		m, err := parseAnswer(c.rbuf[off:c.rlen], &c.answer)
		if errors.Is(err, errIncomplete) {
			break
		}
		if err != nil {
			w.fail(c, errProtocol, now)
			return
		}
		off += m
		o := c.fifo[0]
		copy(c.fifo, c.fifo[1:])
		c.fifo = c.fifo[:len(c.fifo)-1]
		c.progress = now
		if c.recv.handleAnswer(o, c.answer.status, c.answer.body, now-o.due, w.r.measured(o.start)) {
			o.due = now
			w.send(c, o, now)
		} else {
			c.release(o)
		}
		if c.answer.close {
			w.fail(c, errClosed, now)
			return
		}
	}
	c.rlen = copy(c.rbuf, c.rbuf[off:c.rlen])
	w.fill(c, now)
	w.flush(c, now)
}

// flush writes c's pending output; what the socket does not take waits for
// EPOLLOUT.
func (w *epollWorker) flush(c *econn, now int64) {
	for c.woff < len(c.out) {
		n, err := rawIO(unix.SYS_WRITE, c.fd, c.out[c.woff:])
		if errors.Is(err, unix.EAGAIN) {
			if !c.waiting {
				c.waiting = true
				w.ctl(c, unix.EPOLLIN|unix.EPOLLOUT)
			}
			return
		}
		if err != nil {
			w.fail(c, errWrite, now)
			return
		}
		c.woff += n
	}
	c.out, c.woff = c.out[:0], 0
	if c.waiting {
		c.waiting = false
		w.ctl(c, unix.EPOLLIN)
	}
}

func (w *epollWorker) ctl(c *econn, events uint32) {
	w.ev = unix.EpollEvent{Events: events, Fd: int32(c.idx)}
	if unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, c.fd, &w.ev) != nil {
		w.fail(c, errWrite, w.r.now())
	}
}

// fail closes c's socket and accounts for every request it takes with it;
// the sweep reconnects it while the run goes on.
func (w *epollWorker) fail(c *econn, class string, now int64) {
	for _, o := range c.fifo {
		c.lost(class, o.start)
	}
	c.fifo = c.fifo[:0]
	w.closeSocket(c)
	c.freeAll()
	c.redialAt = now
}

func (w *epollWorker) closeSocket(c *econn) {
	if c.fd >= 0 {
		unix.Close(c.fd) // also leaves the epoll set: the descriptor is not shared
		c.fd = -1
	}
	c.rlen, c.out, c.woff, c.waiting = 0, c.out[:0], 0, false
}

// rawIO is read(2) or write(2) as a raw system call: the sockets are
// non-blocking, so the scheduler need not be told the thread may block.
func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
