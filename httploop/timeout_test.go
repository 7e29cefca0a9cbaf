//go:build linux

package httploop

import (
	"bufio"
	"fmt"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

func TestSlowloris(t *testing.T) {
	const limit = 300 * time.Millisecond
	s := start(t, testHandler, Config{HeaderTimeout: limit, Tick: 10 * time.Millisecond})
	slow := dial(t, s.addr)
	began := time.Now()
	write(t, slow, "GET /slow HTTP/1.1\r\nHost: x\r\nX-Stall: ") // and nothing more

	// Meanwhile another client is served promptly, throughout: until the
	// slow client's answer starts to arrive.
	sr := bufio.NewReader(slow)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		slow.SetReadDeadline(time.Now().Add(await.Default))
		sr.Peek(1)
	}()
	fast := dial(t, s.addr)
	fr := bufio.NewReader(fast)
	var worst time.Duration
	stalling := func() bool {
		select {
		case <-answered:
			return false
		default:
			return true
		}
	}
	for i := 0; stalling(); i++ {
		t0 := time.Now()
		path := fmt.Sprintf("/fast/%d", i)
		write(t, fast, get(path))
		if _, body := readResponse(t, fast, fr, "GET"); body != path {
			t.Fatalf("%q, want %q", body, path)
		}
		worst = max(worst, time.Since(t0))
	}
	if worst > time.Second {
		t.Fatalf("a request took %v while the slow client stalled", worst)
	}

	resp, body := readResponse(t, slow, sr, "GET")
	waited := time.Since(began)
	if resp.StatusCode != 408 || problemOf(t, resp, body) != "request-timeout" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if waited < limit {
		t.Fatalf("408 after %v, before the %v deadline", waited, limit)
	}
	expectEOF(t, slow, sr)
	slow.Close()
	await.True(t, "timeout counted", func() bool { return s.Stats().Closed[CloseReadTimeout] == 1 })
}

func TestBodyTimeout(t *testing.T) {
	const limit = 300 * time.Millisecond
	s := start(t, testHandler, Config{BodyTimeout: limit, Tick: 10 * time.Millisecond})
	c := dial(t, s.addr)
	began := time.Now()
	write(t, c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	br := bufio.NewReader(c)
	resp, body := readResponse(t, c, br, "POST")
	if resp.StatusCode != 408 || problemOf(t, resp, body) != "request-timeout" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if waited := time.Since(began); waited < limit {
		t.Fatalf("408 after %v", waited)
	}
	expectEOF(t, c, br)
}

func TestIdleTimeout(t *testing.T) {
	const limit = 200 * time.Millisecond
	s := start(t, testHandler, Config{IdleTimeout: limit, Tick: 10 * time.Millisecond})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	write(t, c, get("/a"))
	readResponse(t, c, br, "GET")
	began := time.Now()
	expectEOF(t, c, br) // closed silently: no 408 for an idle keep-alive connection
	if d := time.Since(began); d < limit-20*time.Millisecond {
		t.Fatalf("closed after %v idle", d)
	}
	await.True(t, "idle close counted", func() bool { return s.Stats().Closed[CloseIdle] == 1 })
}

// TestSweepShare checks that each iteration visits a share of the
// connections proportional to the time elapsed, so that every connection is
// looked at about once per Tick.
func TestSweepShare(t *testing.T) {
	l := memLoop(t, testHandler, Config{Tick: 100 * time.Millisecond})
	const n = 1000
	for i := range n {
		l.conns = append(l.conns, &conn{fd: -1, slot: uint32(i), open: true})
	}
	l.now = int64(time.Hour)
	for _, c := range l.conns {
		c.lastActive = l.now // far from idle
	}
	l.sweptAt = l.now
	step := func(d time.Duration) int {
		before := l.sweepPos
		l.now += int64(d)
		l.sweep()
		return (l.sweepPos - before + n) % n
	}
	if got := step(10 * time.Millisecond); got != n/10 {
		t.Fatalf("a tenth of a tick visited %d of %d", got, n)
	}
	if got := step(50 * time.Microsecond); got != 0 {
		t.Fatalf("a tiny step visited %d", got)
	}
	if got := step(50 * time.Microsecond); got != 1 {
		t.Fatalf("the owed visit was not paid: %d", got)
	}
	before := l.sweepPos
	l.now += int64(time.Second)
	l.sweep()
	if l.sweepPos != before {
		t.Fatalf("a long gap visited more than the table: moved %d", l.sweepPos-before)
	}
	for _, c := range l.conns {
		c.open = false // not real sockets
	}
}
