package h2

import (
	"net"
	"sync"
	"testing"
	"time"
)

// loopServer serves h2 Conns the way the data plane's loop does, one
// goroutine per connection standing in for the loop's thread: it reads
// into a buffer, calls Step until NeedMore, hands events to handle, and
// writes out. Work for a connection (answers held for later) runs on its
// goroutine through do.
type loopServer struct {
	t      testing.TB
	ln     net.Listener
	cfg    *Config
	handle func(l *testLoop, ev Event, r *Request)

	mu     sync.Mutex
	loops  []*testLoop
	record func([]byte) // if set, sees every byte read
	wg     sync.WaitGroup
}

// testLoop is one connection's loop.
type testLoop struct {
	s       *loopServer
	c       *Conn
	nc      net.Conn
	buf     []byte // in's backing array
	in      []byte
	out     []byte
	tasks   chan func(*testLoop)
	done    chan struct{}
	held    map[uint32][]byte // calls held for a later answer, by stream
	closing bool              // Step said Closing
	maxOut  int
	// The most answer bytes held back by flow control at once.
	maxPending int
}

func startLoopServer(t testing.TB, cfg *Config, handle func(l *testLoop, ev Event, r *Request)) *loopServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	s := &loopServer{t: t, ln: ln, cfg: cfg, handle: handle}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *loopServer) addr() string { return s.ln.Addr().String() }

func (s *loopServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		l := &testLoop{
			s: s, c: NewConn(s.cfg), nc: nc,
			buf:   make([]byte, 0, 4*MinInputBytes),
			tasks: make(chan func(*testLoop)),
			done:  make(chan struct{}),
			held:  map[uint32][]byte{},
		}
		s.mu.Lock()
		s.loops = append(s.loops, l)
		s.mu.Unlock()
		s.wg.Add(1)
		go l.run()
	}
}

func (s *loopServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, l := range s.loops {
		l.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// do runs f on every live loop's goroutine and waits for it.
func (s *loopServer) do(f func(l *testLoop)) {
	s.mu.Lock()
	loops := append([]*testLoop(nil), s.loops...)
	s.mu.Unlock()
	for _, l := range loops {
		ran := make(chan struct{})
		select {
		case l.tasks <- func(l *testLoop) { f(l); close(ran) }:
			<-ran
		case <-l.done:
		}
	}
}

// waitFor polls cond on the loops' goroutines until it holds.
func (s *loopServer) waitFor(what string, cond func(l *testLoop) bool) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := false
		s.do(func(l *testLoop) { ok = ok || cond(l) })
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (l *testLoop) run() {
	defer l.s.wg.Done()
	defer close(l.done)
	reads := make(chan []byte)
	go func() {
		defer close(reads)
		for {
			b := make([]byte, 32<<10)
			n, err := l.nc.Read(b)
			if n > 0 {
				select {
				case reads <- b[:n]:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	l.out = l.c.Start(l.out)
	if !l.flush() {
		l.nc.Close()
		return
	}
	for {
		select {
		case b, ok := <-reads:
			if !ok {
				l.nc.Close()
				return
			}
			if l.s.record != nil {
				l.s.record(b)
			}
			l.in = append(l.in, b...)
		case f := <-l.tasks:
			f(l)
		}
		if !l.step() {
			l.linger(reads)
			return
		}
	}
}

// step calls Step until NeedMore, handling events; false once the
// connection must close.
func (l *testLoop) step() bool {
	for {
		n, out, ev := l.c.Step(l.in, l.out)
		l.out, l.in = out, l.in[n:]
		if s := l.c.Streams(); s > int(l.s.cfg.MaxStreams) {
			l.s.t.Errorf("%d streams", s)
		}
		l.maxPending = max(l.maxPending, l.c.Pending())
		switch ev {
		case NeedMore:
			l.in = append(l.buf[:0], l.in...) // compact: the last Message is done with
			l.buf = l.in[:0]
			return l.flush()
		case Message, HalfClosed:
			l.s.handle(l, ev, l.c.Request())
			l.maxPending = max(l.maxPending, l.c.Pending())
		case Closing:
			l.closing = true
			l.flush()
			return false
		}
	}
}

func (l *testLoop) flush() bool {
	l.maxOut = max(l.maxOut, len(l.out))
	if len(l.out) == 0 {
		return true
	}
	l.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := l.nc.Write(l.out)
	l.out = l.out[:0]
	return err == nil
}

// linger half-closes and waits briefly for the client's FIN, so the last
// frames are not destroyed by a reset.
func (l *testLoop) linger(reads chan []byte) {
	if tc, ok := l.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	timeout := time.After(2 * time.Second)
	for {
		select {
		case _, ok := <-reads:
			if !ok {
				l.nc.Close()
				return
			}
		case <-timeout:
			l.nc.Close()
			return
		}
	}
}
