//go:build linux

package httploop

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/h2"
)

// Epoll event tokens. A connection's event carries its slot (≥ 0) in Fd and
// its generation in Pad; the loop's own descriptors use negative tokens.
const (
	tokenListener = -1
	tokenWake     = -2
	tokenCtl      = -3
	tokenGRPC     = -4 // the gRPC listener (Config.GRPC)
)

const (
	// maxSlots bounds connection slots: a Deferred packs a slot in the 24
	// bits above its sequence number, and leaves the top bit clear (a
	// handler's other tickets may use it: node's hand-over desk).
	maxSlots = 1 << 23

	// acceptBatch bounds accepts per iteration so that a connection storm
	// does not starve the requests of connections already open.
	acceptBatch = 64

	// eventBatch is how many readiness events one epoll_wait returns at most.
	eventBatch = 256
)

// Loop is one HTTP/1.1 server loop: one listener, one epoll instance, and
// every connection accepted from that listener, all driven by the goroutine
// that calls Run. Besides Run, only Drain and Stats may be called from other
// goroutines; Complete belongs to the loop thread.
type Loop struct {
	cfg     Config
	handler Handler
	addr    *net.TCPAddr

	ln     int // listener; -1 once closed
	gln    int // the gRPC listener (Config.GRPC); -1 without one or once closed
	epfd   int
	park   *parker // nil where the runtime's poller refused the epoll fd: idle sleeps in epoll_wait
	events []unix.EpollEvent
	ev     unix.EpollEvent // argument of epoll_ctl, a field so it does not escape per call

	conns  []*conn  // by slot; a slot's conn is reused after close
	free   []uint32 // free slots
	nconns int      // open connections, lingering ones included
	ngrpc  int      // of them, gRPC connections
	// maxGRPC bounds ngrpc (GRPC.MaxConns, or MaxConns).
	maxGRPC int
	nextID  uint64
	ready   []ref // connections to pump in this iteration
	spare   []ref

	// Answers sent together at the end of an iteration (sendRing,
	// Config.BatchSends); ring is nil where that is off or io_uring failed,
	// and each answer is then written as soon as it is made.
	ring      *sendRing
	sendq     []ref
	sendSpare []ref
	sendBatch []*conn
	sendRes   []int32
	bufs      bufPool

	// scratch receives input that is thrown away (while lingering).
	scratch []byte

	now         int64 // the iteration's one clock reading
	acceptMore  bool  // the listener may hold connections not yet accepted
	acceptGRPC  bool  // the gRPC listener may
	acceptRetry int64 // after an accept error: when to try again; 0 if not waiting
	sweptAt     int64
	sweepPos    int
	deferSeq    uint64
	draining    bool

	// Request parsing and response writing state, reused for every request.
	// req and resp belong to the handler being run; aux carries the answers
	// the loop gives itself and completed deferred answers, so Complete may
	// be called from inside a handler.
	req  fasthttp.Request
	resp fasthttp.Response
	aux  fasthttp.Response
	ctx  Ctx
	head bytes.Reader
	// The gRPC side: idle h2.Conns, the handler's context, and the
	// connection whose stream is being handled (its answers go out with
	// its pump, without queueing it again).
	h2free  []*h2.Conn
	sctx    StreamCtx
	serving *conn
	br      *bufio.Reader
	ow      outWriter
	bw      *bufio.Writer

	cnt counters

	// Cross-goroutine state. ctl is an eventfd Drain rings; ctlMu keeps a
	// ring from racing with its close when Run ends.
	ctlMu   sync.Mutex
	ctl     int
	drainAt atomic.Int64 // Unix nanoseconds; 0 until Drain
	running atomic.Bool
	stopped atomic.Bool
}

// ref names a connection in the ready list; a stale gen means the slot has
// been closed (and perhaps reused) since it was queued.
type ref struct {
	slot, gen uint32
}

// New prepares a loop over ln, which must be open (Listen, or Bind then
// Open) and which it takes over (and closes when it drains or stops). Run
// must then be called.
func New(ln *Listener, h Handler, cfg Config) (*Loop, error) {
	if h == nil {
		return nil, errors.New("httploop: nil Handler")
	}
	if ln == nil || ln.fd < 0 {
		return nil, errors.New("httploop: listener closed or already owned by a loop")
	}
	if !ln.open {
		// A loop must not register a socket that does not listen: epoll
		// reports it hung up, and accept fails, on every edge.
		return nil, errors.New("httploop: listener bound but not open (call Open first)")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Loop{
		cfg:     cfg,
		handler: h,
		addr:    ln.addr,
		ln:      ln.fd,
		gln:     -1,
		epfd:    -1,
		ctl:     -1,
		events:  make([]unix.EpollEvent, eventBatch),
		bufs:    bufPool{size: cfg.ReadBufferSize},
		scratch: make([]byte, 16<<10),
		br:      bufio.NewReaderSize(nil, cfg.MaxHeaderBytes),
	}
	l.bw = bufio.NewWriterSize(&l.ow, 4<<10)
	l.cnt.init()
	if cfg.BatchSends {
		if r, err := newSendRing(eventBatch); err == nil {
			l.ring = r
			l.sendBatch = make([]*conn, 0, r.entries)
			l.sendRes = make([]int32, r.entries)
		}
	}
	// fasthttp adds a Date header by default, from a clock its own goroutine
	// refreshes every second: no clock read per response on this thread.
	if err := l.setup(); err != nil {
		l.closeFDs()
		return nil, err
	}
	ln.fd = -1 // the loop owns it now
	if cfg.GRPC != nil {
		cfg.GRPC.Listener.fd = -1
		l.maxGRPC = cmp.Or(cfg.GRPC.MaxConns, cfg.MaxConns)
	}
	return l, nil
}

func (l *Loop) setup() error {
	var err error
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("httploop: epoll_create1: %w", err)
	}
	if l.ctl, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("httploop: eventfd: %w", err)
	}
	// The listener is edge-triggered: accept drains it (or remembers that
	// it did not, in acceptMore). The two eventfds are level-triggered and
	// reset by reading them, so a ring is never lost between edges.
	if err := l.register(l.ln, unix.EPOLLIN|unix.EPOLLET, tokenListener, 0); err != nil {
		return err
	}
	if g := l.cfg.GRPC; g != nil {
		if err := l.register(g.Listener.fd, unix.EPOLLIN|unix.EPOLLET, tokenGRPC, 0); err != nil {
			return err
		}
		l.gln = g.Listener.fd
	}
	if err := l.register(l.ctl, unix.EPOLLIN, tokenCtl, 0); err != nil {
		return err
	}
	if w := l.cfg.Wake; w != nil {
		if err := l.register(w.FD(), unix.EPOLLIN, tokenWake, 0); err != nil {
			return err
		}
	}
	// Without a parker idle sleeps cost more, and nothing else changes.
	l.park, _ = newParker(l.epfd)
	return nil
}

func (l *Loop) register(fd int, events uint32, token int32, gen uint32) error {
	l.ev = unix.EpollEvent{Events: events, Fd: token, Pad: int32(gen)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &l.ev); err != nil {
		return fmt.Errorf("httploop: epoll_ctl add %d: %w", fd, err)
	}
	return nil
}

// Addr is the address the loop's listener is bound to.
func (l *Loop) Addr() *net.TCPAddr {
	return l.addr
}

// Stats returns the loop's counters as of its last iteration. Any goroutine.
func (l *Loop) Stats() Stats {
	return l.cnt.pub.snapshot()
}

// wait is epoll_wait, with BeforeBlock run between a poll that found
// nothing and the blocking wait; an idle wait parks in the runtime's
// poller (park.go).
func (l *Loop) wait(timeout int, idle bool) (int, error) {
	if timeout != 0 && l.cfg.BeforeBlock != nil {
		if n, err := rawEpollWait(l.epfd, l.events, 0); n != 0 || err != nil {
			return n, err
		}
		l.cfg.BeforeBlock()
	}
	if idle && timeout > 0 && l.park != nil {
		return l.park.wait(l.events, time.Duration(timeout)*time.Millisecond)
	}
	// The first rawWaitMs raw (rawio.go), then, if nothing came, the rest
	// as a regular call that gives the P up.
	if timeout >= 0 && timeout <= rawWaitMs {
		return rawEpollWait(l.epfd, l.events, timeout)
	}
	if n, err := rawEpollWait(l.epfd, l.events, rawWaitMs); n > 0 || err != nil && err != unix.EINTR {
		return n, err
	}
	if timeout > 0 {
		timeout -= rawWaitMs
	}
	return unix.EpollWait(l.epfd, l.events, timeout)
}

// DeferTimeout is how long a postponed answer may wait before the loop
// answers 504 itself (Config.DeferTimeout, with its default).
func (l *Loop) DeferTimeout() time.Duration { return l.cfg.DeferTimeout }

// Run serves until Drain completes or an unrecoverable poller error. Call it
// once, on a goroutine locked to its OS thread (and, for a shard, pinned):
// every handler, OnWake and OnTick call happens on it.
func (l *Loop) Run() error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("httploop: Run called twice")
	}
	defer l.stop()
	tick := int64(l.cfg.Tick)
	quiet := false // the last wait brought nothing
	for {
		timeout := int(tick / int64(time.Millisecond))
		idle := quiet && l.cfg.Quiet != nil && l.cfg.Quiet()
		if idle {
			timeout = int(l.cfg.IdleTick / time.Millisecond)
		}
		if len(l.ready) > 0 || len(l.sendq) > 0 || l.acceptMore || l.acceptGRPC {
			timeout = 0
		}
		if d := l.drainAt.Load(); d != 0 && l.draining {
			// Wake in time for the drain deadline.
			timeout = min(timeout, int(max(d-l.now, 0)/int64(time.Millisecond))+1)
		}
		woke := false
		w := l.cfg.Wake
		// BeginSleep every iteration, not only before blocking: a producer
		// rings only for a consumer that announced sleep, so a busy loop
		// that never announced would otherwise never learn of its messages.
		if w != nil && !w.BeginSleep() {
			woke, timeout = true, 0
		}
		n, err := l.wait(timeout, idle)
		if w != nil {
			w.EndSleep()
		}
		quiet = n == 0 && !woke
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("httploop: epoll_wait: %w", err)
		}
		l.now = time.Now().UnixNano()
		if l.cfg.OnTick != nil {
			l.cfg.OnTick(l.now)
		}
		for i := range max(n, 0) {
			ev := &l.events[i]
			switch ev.Fd {
			case tokenListener:
				l.acceptMore = true
			case tokenGRPC:
				l.acceptGRPC = true
			case tokenWake:
				w.Drain()
				woke = true
			case tokenCtl:
				l.readCtl()
			default:
				l.event(ev)
			}
		}
		if woke && l.cfg.OnWake != nil {
			l.cfg.OnWake()
		}
		if l.acceptRetry != 0 && l.now >= l.acceptRetry {
			l.acceptRetry, l.acceptMore, l.acceptGRPC = 0, true, l.gln >= 0
		}
		if l.acceptMore {
			l.acceptMore = l.accept(l.ln, false)
		}
		if l.acceptGRPC {
			l.acceptGRPC = l.accept(l.gln, true)
		}
		l.runReady()
		l.sendQueued()
		l.sweep()
		if l.park != nil {
			l.park.settle(l.now)
		}
		if d := l.drainAt.Load(); d != 0 && l.drainStep(d) {
			return nil
		}
		l.cnt.publish()
	}
}

// event handles readiness of a connection.
func (l *Loop) event(ev *unix.EpollEvent) {
	c := l.conns[ev.Fd]
	if !c.open || c.gen != uint32(ev.Pad) {
		return // closed earlier in this batch
	}
	if ev.Events&unix.EPOLLERR != 0 || ev.Events&unix.EPOLLHUP != 0 {
		// Reset, or both directions shut. A lingering connection has got
		// what it waited for; any other was closed by its peer.
		why := ClosePeer
		if c.lingering {
			why = c.closeWhy
		}
		l.close(c, why)
		return
	}
	if ev.Events&unix.EPOLLOUT != 0 {
		c.full = false
	}
	if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP) != 0 {
		c.readable = true
		if ev.Events&unix.EPOLLRDHUP != 0 {
			c.rdhup = true
		}
	}
	l.pump(c)
}

// accept takes up to acceptBatch connections from listener ln (the gRPC
// one when grpc), and reports whether it may hold more.
func (l *Loop) accept(ln int, grpc bool) (more bool) {
	if ln < 0 {
		return false
	}
	for range acceptBatch {
		// Raw accept4: unix.Accept4 builds a Sockaddr for the peer,
		// one allocation per connection that nothing here reads.
		r, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(ln), 0, 0,
			unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch errno {
		case 0:
		case unix.EAGAIN:
			return false
		case unix.EINTR, unix.ECONNABORTED:
			continue
		default:
			// Out of descriptors or buffers: the connections stay in
			// the backlog and, the listener being edge-triggered,
			// no new edge may come for them, so retry after a tick.
			l.cnt.v[statAcceptErrors]++
			l.acceptRetry = l.now + int64(l.cfg.Tick)
			return false
		}
		fd := int(r)
		if l.nconns >= l.cfg.MaxConns || grpc && l.ngrpc >= l.maxGRPC {
			unix.Close(fd)
			l.cnt.v[statRejected]++
			continue
		}
		if c := l.open(fd); c != nil && grpc {
			l.openGRPC(c)
		}
	}
	return true
}

// open starts serving an accepted socket; nil if it could not.
func (l *Loop) open(fd int) *conn {
	// Responses go out whole, one write per batch, so Nagle's algorithm
	// would only add delay (and deadlock with delayed ACKs on pipelines).
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	var c *conn
	if n := len(l.free); n > 0 {
		c = l.conns[l.free[n-1]]
		l.free = l.free[:n-1]
	} else {
		c = &conn{slot: uint32(len(l.conns))}
		l.conns = append(l.conns, c)
	}
	l.nextID++
	c.fd, c.id, c.open, c.lastActive = fd, l.nextID, true, l.now
	// Edge-triggered, and registered once for its whole life, writability
	// included: pausing and resuming a connection (backpressure, a deferred
	// answer) then costs no epoll_ctl, only the flags the loop keeps itself.
	if err := l.register(fd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, int32(c.slot), c.gen); err != nil {
		l.cnt.v[statAcceptErrors]++
		c.open = false
		unix.Close(fd)
		l.free = append(l.free, c.slot)
		return nil
	}
	l.nconns++
	l.cnt.v[statAccepted]++
	l.cnt.v[statConns]++
	return c
}

// queue asks for c to be pumped later in this iteration (or, if queued
// while the list runs, at the start of the next, which then does not sleep).
func (l *Loop) queue(c *conn) {
	if !c.queued {
		c.queued = true
		l.ready = append(l.ready, ref{c.slot, c.gen})
	}
}

func (l *Loop) runReady() {
	list := l.ready
	l.ready = l.spare[:0]
	for _, r := range list {
		c := l.conns[r.slot]
		if !c.open || c.gen != r.gen {
			continue
		}
		c.queued = false
		l.pump(c)
	}
	l.spare = list[:0]
}

// readCtl resets the control eventfd; what it announced is read from drainAt.
func (l *Loop) readCtl() {
	var b [8]byte
	_, _ = unix.Read(l.ctl, b[:])
}

// stop closes everything when Run returns.
func (l *Loop) stop() {
	for _, c := range l.conns {
		if c.open {
			l.close(c, CloseDrain)
		}
	}
	l.closeListener()
	l.cnt.publish()
	l.closeFDs()
	l.stopped.Store(true)
}

func (l *Loop) closeListener() {
	if l.ln >= 0 {
		unix.Close(l.ln) // closing also removes it from the epoll set
		l.ln = -1
	}
	if l.gln >= 0 {
		unix.Close(l.gln)
		l.gln = -1
	}
	l.acceptMore, l.acceptGRPC = false, false
}

func (l *Loop) closeFDs() {
	if l.ring != nil {
		l.ring.close()
		l.ring = nil
	}
	if l.park != nil {
		l.park.close()
		l.park = nil
	}
	if l.epfd >= 0 {
		unix.Close(l.epfd)
		l.epfd = -1
	}
	l.ctlMu.Lock()
	if l.ctl >= 0 {
		unix.Close(l.ctl)
		l.ctl = -1
	}
	l.ctlMu.Unlock()
}
