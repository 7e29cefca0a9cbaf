//go:build linux

package httploop

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// server is a Loop running on its own locked goroutine.
type server struct {
	*Loop
	addr string
	done chan error
	once sync.Once
	err  error
}

// prepare builds a loop on a fresh loopback port without running it, so a
// test can wire callbacks to it first (the go statement in run orders those
// writes before the loop thread reads them).
func prepare(t testing.TB, h Handler, cfg Config) *server {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return prepareOn(t, ln, h, cfg)
}

func prepareOn(t testing.TB, ln *Listener, h Handler, cfg Config) *server {
	t.Helper()
	addr := ln.Addr().String()
	l, err := New(ln, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{Loop: l, addr: addr, done: make(chan error, 1)}
	t.Cleanup(func() {
		s.Drain(time.Now())
		if err := s.wait(5 * time.Second); err != nil {
			t.Error(err)
		}
	})
	return s
}

func (s *server) run() *server {
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s.done <- s.Run()
	}()
	return s
}

func start(t testing.TB, h Handler, cfg Config) *server {
	t.Helper()
	return prepare(t, h, cfg).run()
}

// wait waits for Run to return and reports its error (or a timeout).
func (s *server) wait(d time.Duration) error {
	s.once.Do(func() {
		select {
		case s.err = <-s.done:
		case <-time.After(d):
			s.err = fmt.Errorf("Run did not return within %v", d)
		}
	})
	return s.err
}

// testHandler answers by path:
//
//	/big     16 KiB body
//	/echo    the request body
//	/close   asks for the connection to be closed
//	other    the path itself
func testHandler(x *Ctx) {
	path := x.Request.URI().Path()
	x.Response.Header.SetContentType("text/plain")
	switch string(path) {
	case "/big":
		x.Response.SetBodyRaw(bigBody)
	case "/echo":
		x.Response.SetBodyRaw(x.Request.Body())
	case "/close":
		x.Response.SetConnectionClose()
		x.Response.SetBodyRaw(path)
	default:
		x.Response.SetBodyRaw(path)
	}
}

var bigBody = bytes.Repeat([]byte("0123456789abcdef"), 1024)

// dial opens a raw client connection closed at test end.
func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func write(t testing.TB, c net.Conn, s string) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// readResponse reads one response and its body.
func readResponse(t testing.TB, c net.Conn, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

// expectEOF checks that the server closed the connection, after anything
// already read.
func expectEOF(t testing.TB, c net.Conn, br *bufio.Reader) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := br.ReadByte()
	if err == nil {
		t.Fatalf("expected the connection closed, read %q", b)
	}
	if err != io.EOF && !isReset(err) {
		t.Fatalf("expected EOF, got %v", err)
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || errorIs(err, syscall.ECONNRESET))
}

func errorIs(err error, target syscall.Errno) bool {
	var e syscall.Errno
	for err != nil {
		if x, ok := err.(syscall.Errno); ok {
			e = x
			break
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			break
		}
		err = u.Unwrap()
	}
	return e == target
}

func get(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"
}

func TestKeepAliveNetHTTP(t *testing.T) {
	s := start(t, testHandler, Config{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 200 {
		path := fmt.Sprintf("/k/%d", i)
		resp, err := client.Get("http://" + s.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, b)
		}
		if resp.Header.Get("Date") == "" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Fatalf("headers %v", resp.Header)
		}
	}
	await.True(t, "stats", func() bool { return s.Stats().Requests == 200 })
	if st := s.Stats(); st.Accepted != 1 || st.Conns != 1 {
		t.Fatalf("200 keep-alive requests used %d connections (%d open)", st.Accepted, st.Conns)
	}
}

func TestPipelining(t *testing.T) {
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr)
	var all strings.Builder
	for i := range 100 {
		all.WriteString(get(fmt.Sprintf("/p/%d", i)))
	}
	write(t, c, all.String()) // one write, 100 requests
	br := bufio.NewReader(c)
	for i := range 100 {
		resp, body := readResponse(t, c, br, "GET")
		if want := fmt.Sprintf("/p/%d", i); resp.StatusCode != 200 || body != want {
			t.Fatalf("response %d: %d %q, want %q", i, resp.StatusCode, body, want)
		}
	}
}

func TestReusePortSpreadsConnections(t *testing.T) {
	ln1, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := Listen(ln1.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s1 := prepareOn(t, ln1, testHandler, Config{}).run()
	s2 := prepareOn(t, ln2, testHandler, Config{}).run()
	const n = 64
	for i := range n {
		c := dial(t, s1.addr)
		write(t, c, get("/r"))
		if _, body := readResponse(t, c, bufio.NewReader(c), "GET"); body != "/r" {
			t.Fatalf("conn %d: %q", i, body)
		}
		c.Close()
	}
	await.True(t, "stats", func() bool {
		return s1.Stats().Requests+s2.Stats().Requests == n
	})
	a1, a2 := s1.Stats().Accepted, s2.Stats().Accepted
	// The kernel hashes each connection's 4-tuple to a listener: with 64
	// connections, one loop getting all of them has probability 2^-63.
	if a1 == 0 || a2 == 0 || a1+a2 != n {
		t.Fatalf("accepted %d and %d of %d", a1, a2, n)
	}
}

func TestMaxConns(t *testing.T) {
	s := start(t, testHandler, Config{MaxConns: 2})
	for range 2 {
		c := dial(t, s.addr)
		write(t, c, get("/m"))
		readResponse(t, c, bufio.NewReader(c), "GET")
	}
	extra := dial(t, s.addr)
	expectEOF(t, extra, bufio.NewReader(extra))
	await.True(t, "rejection counted", func() bool { return s.Stats().Rejected == 1 })
	if st := s.Stats(); st.Accepted != 2 || st.Conns != 2 {
		t.Fatalf("accepted %d, open %d", st.Accepted, st.Conns)
	}
}

// raiseFileLimit lifts the soft descriptor limit to the hard one.
func raiseFileLimit(t testing.TB, need uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
	}
	if rl.Cur < need {
		t.Skipf("descriptor limit %d is below the %d this test needs", rl.Cur, need)
	}
}

func TestTwoThousandConnections(t *testing.T) {
	const n = 2000
	raiseFileLimit(t, 2*n+100)
	s := start(t, testHandler, Config{})
	var (
		connected sync.WaitGroup
		finished  sync.WaitGroup
		errs      = make(chan error, n)
	)
	connected.Add(n)
	finished.Add(n)
	for i := range n {
		go func() {
			defer finished.Done()
			c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
			if err != nil {
				connected.Done()
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(c)
			ask := func(j int) error {
				path := fmt.Sprintf("/c/%d/%d", i, j)
				if _, err := io.WriteString(c, get(path)); err != nil {
					return err
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return err
				}
				b, err := io.ReadAll(resp.Body)
				if err == nil && string(b) != path {
					err = fmt.Errorf("%s answered %q", path, b)
				}
				return err
			}
			err = ask(0)
			connected.Done()
			if err != nil {
				errs <- err
				return
			}
			connected.Wait() // every connection is open at once from here
			for j := 1; j < 3; j++ {
				if err := ask(j); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	connected.Wait()
	if open := s.Stats().Conns; open < n/2 {
		// Stats lag by at most one iteration; most must be open.
		await.True(t, "connections open", func() bool { return s.Stats().Conns == n })
	}
	finished.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	await.True(t, "all closed", func() bool { return s.Stats().Conns == 0 })
	if st := s.Stats(); st.Accepted != n || st.Requests != 3*n {
		t.Fatalf("accepted %d, requests %d", st.Accepted, st.Requests)
	}
}

func TestRunTwice(t *testing.T) {
	s := start(t, testHandler, Config{})
	await.True(t, "running", func() bool { return s.running.Load() })
	if err := s.Run(); err == nil {
		t.Fatal("second Run succeeded")
	}
}

func TestNewRejects(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := New(ln, nil, Config{}); err == nil {
		t.Fatal("nil handler accepted")
	}
	if _, err := New(ln, testHandler, Config{Tick: time.Microsecond}); err == nil {
		t.Fatal("sub-millisecond tick accepted")
	}
	if ln.fd < 0 {
		t.Fatal("failed New took the listener")
	}
}

// TestClockOncePerIteration checks that OnTick and the handlers of the same
// iteration see the same clock reading, and that it never goes backwards.
func TestClockOncePerIteration(t *testing.T) {
	var (
		ticks    atomic.Int64
		lastTick int64 // loop thread only
		bad      atomic.Value
	)
	cfg := Config{OnTick: func(now int64) {
		if now < lastTick {
			bad.Store(fmt.Sprintf("clock went back: %d after %d", now, lastTick))
		}
		lastTick = now
		ticks.Add(1)
	}}
	s := start(t, func(x *Ctx) {
		if x.Now != lastTick {
			bad.Store(fmt.Sprintf("handler saw %d, tick %d", x.Now, lastTick))
		}
		testHandler(x)
	}, cfg)
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	for range 20 {
		write(t, c, get("/t"))
		readResponse(t, c, br, "GET")
	}
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	if ticks.Load() < 20 {
		t.Fatalf("%d ticks for 20 requests", ticks.Load())
	}
}

// TestLoopAllocs checks that a warm loop serving keep-alive requests through
// real sockets allocates nothing per request (a raw client allocates
// nothing either, so the process-wide count is the loop's).
func TestLoopAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	s := start(t, jsonHandler, Config{})
	c := dial(t, s.addr)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	req := []byte(get("/v1/check"))
	buf := make([]byte, 64<<10)
	ask := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		// The answer is one segment far smaller than buf.
		if n, err := c.Read(buf); err != nil || !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) {
			t.Fatalf("%q %v", buf[:n], err)
		}
	}
	for range 200 {
		ask()
	}
	const n = 5000
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		ask()
	}
	runtime.ReadMemStats(&m1)
	// Allow for the runtime's and fasthttp's date ticker's own
	// background allocations: well under one per 50 requests.
	if per := float64(m1.Mallocs-m0.Mallocs) / n; per > 0.02 {
		t.Fatalf("%.3f allocations per request", per)
	}
}
