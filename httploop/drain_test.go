//go:build linux

package httploop

import (
	"bufio"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

func TestDrain(t *testing.T) {
	d := startDeferrer(t, Config{})
	busy := dial(t, d.addr)
	write(t, busy, get("/d/inflight"))
	j := d.nextJob(t)

	idle := dial(t, d.addr)
	ir := bufio.NewReader(idle)
	write(t, idle, get("/once"))
	readResponse(t, idle, ir, "GET")

	d.Drain(time.Now().Add(10 * time.Second))
	expectEOF(t, idle, ir) // idle connections go at once
	await.True(t, "listener closed", func() bool {
		c, err := net.DialTimeout("tcp", d.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})

	// The deferred request is still answered, with Connection: close.
	d.answer(j)
	br := bufio.NewReader(busy)
	resp, body := readResponse(t, busy, br, "GET")
	if body != "done /d/inflight" || !resp.Close {
		t.Fatalf("%q close=%v", body, resp.Close)
	}
	expectEOF(t, busy, br)
	busy.Close()
	if err := d.wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Conns != 0 || st.Closed[CloseDrain] != 2 {
		t.Fatalf("after drain: %d open, %d closed by drain", st.Conns, st.Closed[CloseDrain])
	}
}

func TestDrainDeadline(t *testing.T) {
	d := startDeferrer(t, Config{})
	c := dial(t, d.addr)
	write(t, c, get("/d/forever"))
	d.nextJob(t) // never answered
	began := time.Now()
	d.Drain(began.Add(200 * time.Millisecond))
	if err := d.wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < 200*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("Run returned %v after Drain", waited)
	}
	expectEOF(t, c, bufio.NewReader(c))
}

func TestDrainWithoutConnections(t *testing.T) {
	s := start(t, testHandler, Config{Tick: time.Second})
	began := time.Now()
	s.Drain(time.Now().Add(time.Minute))
	s.Drain(time.Now().Add(time.Hour)) // a later deadline does not extend the first
	if err := s.wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 500*time.Millisecond {
		t.Fatalf("an idle loop took %v to drain", d)
	}
	s.Drain(time.Now()) // after Run returned: harmless
}

// A drain waits for answers the handler holds beside the loop's
// connections (Config.Holding) until they are given or the deadline
// passes.
func TestDrainWaitsWhileTheHandlerHolds(t *testing.T) {
	var holding atomic.Bool
	holding.Store(true)
	s := start(t, testHandler, Config{Tick: 10 * time.Millisecond, Holding: holding.Load})
	s.Drain(time.Now().Add(time.Minute))
	select {
	case err := <-s.done:
		t.Fatalf("Run returned (%v) while the handler held answers", err)
	case <-time.After(300 * time.Millisecond):
	}
	holding.Store(false)
	if err := s.wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	held := start(t, testHandler, Config{Tick: 10 * time.Millisecond, Holding: func() bool { return true }})
	began := time.Now()
	held.Drain(began.Add(200 * time.Millisecond))
	if err := held.wait(5 * time.Second); err != nil {
		t.Fatalf("a drain past its deadline: %v", err)
	}
	if waited := time.Since(began); waited < 200*time.Millisecond {
		t.Fatalf("Run returned %v after Drain, before its deadline", waited)
	}
}
