//go:build linux

package httploop

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// greedyClient pipelines /big requests without ever reading the answers,
// from a goroutine, until its connection fails. Its kernel buffers are kept
// small so that they fill quickly.
func greedyClient(t *testing.T, addr string) (c *net.TCPConn, written *atomic.Int64) {
	c = dial(t, addr).(*net.TCPConn)
	c.SetReadBuffer(16 << 10)
	c.SetWriteBuffer(16 << 10)
	written = new(atomic.Int64)
	batch := strings.Repeat(get("/big"), 256)
	go func() {
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		for {
			if _, err := io.WriteString(c, batch); err != nil {
				return
			}
			written.Add(256)
		}
	}()
	return c, written
}

// stalled waits until the loop holds more than maxOutput of a client's
// answers: it has stopped dispatching and reading that client's requests,
// and only the client's reading (EPOLLOUT) resumes it.
func stalled(t *testing.T, s *server, maxOutput int) {
	t.Helper()
	await.True(t, "the loop to stop serving the greedy client", func() bool {
		return s.Stats().OutputBuffered > uint64(maxOutput)
	})
}

func TestBackpressure(t *testing.T) {
	const maxOutput = 64 << 10
	s := start(t, testHandler, Config{MaxOutput: maxOutput})
	greedy, written := greedyClient(t, s.addr)
	stalled(t, s, maxOutput)

	st := s.Stats()
	// The loop stops dispatching once MaxOutput is queued, so it holds at
	// most that plus the one response that crossed it.
	if limit := uint64(maxOutput + len(bigBody) + 512); st.OutputBuffered > limit {
		t.Fatalf("%d bytes of output held, limit %d", st.OutputBuffered, limit)
	}
	if int64(st.Requests) >= written.Load() {
		t.Fatalf("served %d of %d written: nothing held back", st.Requests, written.Load())
	}
	other := dial(t, s.addr)
	began := time.Now()
	write(t, other, get("/other"))
	if _, body := readResponse(t, other, bufio.NewReader(other), "GET"); body != "/other" {
		t.Fatalf("other client got %q", body)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("other client waited %v", d)
	}
	// Not reading: input does not grow while the client keeps trying.
	// The loop has gone round since (it served the other client, whose
	// request is all it may have read), and the greedy client's socket
	// stayed readable all along.
	want := st.BytesIn + uint64(len(get("/other")))
	await.True(t, "the other request counted", func() bool { return s.Stats().BytesIn >= want })
	if in := s.Stats().BytesIn; in != want {
		t.Fatalf("loop read %d more bytes from the paused client", in-want)
	}

	greedy.Close()
	await.True(t, "greedy connection closed", func() bool {
		st := s.Stats()
		return st.Conns == 1 && st.OutputBuffered == 0
	})
}

func TestBackpressureResumes(t *testing.T) {
	// A client that pipelines far more than MaxOutput of answers but does
	// read them gets every one, in order.
	s := start(t, testHandler, Config{MaxOutput: 4 << 10})
	c := dial(t, s.addr)
	const n = 300
	go func() {
		var all strings.Builder
		for range n {
			all.WriteString(get("/big"))
		}
		c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, all.String())
	}()
	br := bufio.NewReader(c)
	for i := range n {
		if _, body := readResponse(t, c, br, "GET"); body != string(bigBody) {
			t.Fatalf("response %d: %d bytes", i, len(body))
		}
	}
}

func TestWriteTimeout(t *testing.T) {
	s := start(t, testHandler, Config{WriteTimeout: 300 * time.Millisecond, Tick: 10 * time.Millisecond})
	greedyClient(t, s.addr)
	await.True(t, "write timeout", func() bool { return s.Stats().Closed[CloseWriteTimeout] == 1 })
	if st := s.Stats(); st.Conns != 0 || st.OutputBuffered != 0 {
		t.Fatalf("after write timeout: %d open, %d bytes held", st.Conns, st.OutputBuffered)
	}
}

func TestPeerHalfClose(t *testing.T) {
	// A client may send its request and shut its side: it still gets the
	// answer, and then the connection is closed.
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr).(*net.TCPConn)
	write(t, c, get("/a")+get("/b"))
	c.CloseWrite()
	br := bufio.NewReader(c)
	for _, want := range []string{"/a", "/b"} {
		if _, body := readResponse(t, c, br, "GET"); body != want {
			t.Fatalf("%q, want %q", body, want)
		}
	}
	expectEOF(t, c, br)
	await.True(t, "peer close counted", func() bool { return s.Stats().Closed[ClosePeer] == 1 })
}

func TestLingerEnds(t *testing.T) {
	// After a refusal the loop waits for the client's FIN, but not forever.
	s := start(t, testHandler, Config{Tick: 10 * time.Millisecond})
	c := dial(t, s.addr)
	write(t, c, "NOT HTTP\r\n\r\n")
	br := bufio.NewReader(c)
	readResponse(t, c, br, "GET")
	began := time.Now()
	await.Within(t, 3*lingerTimeout, "lingering connection closed", func() bool { return s.Stats().Conns == 0 })
	if d := time.Since(began); d < lingerTimeout/2 {
		t.Fatalf("closed after %v, before the client's FIN or the linger timeout", d)
	}
	if n := s.Stats().Closed[CloseBadRequest]; n != 1 {
		t.Fatalf("closed as bad request %d times", n)
	}
}

func TestBufPool(t *testing.T) {
	p := bufPool{size: 64}
	b := p.get()
	if cap(b) != 64 || len(b) != 0 {
		t.Fatalf("get: len %d cap %d", len(b), cap(b))
	}
	p.put(append(b, "data"...))
	if c := p.get(); len(c) != 0 || cap(c) != 64 || &c[:1][0] != &b[:1][0] {
		t.Fatal("pooled buffer not reused empty")
	}
	p.put(make([]byte, 10, 128)) // grown buffers are left to the collector
	p.put(nil)
	if len(p.free) != 0 {
		t.Fatalf("%d odd-sized buffers kept", len(p.free))
	}
	for range maxPooled + 10 {
		p.put(make([]byte, 0, 64))
	}
	if len(p.free) != maxPooled {
		t.Fatalf("kept %d, bound %d", len(p.free), maxPooled)
	}
}
