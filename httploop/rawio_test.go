//go:build linux

package httploop

import (
	"bufio"
	"sync/atomic"
	"testing"
	"time"
)

// TestAWaitIsRawOnlyBriefly: a loop that is not quiet waits its Tick (here
// a minute) raw for rawWaitMs only, then in a regular call: it is not woken
// meanwhile (a raw wait that held its P would be preempted by signal every
// 10 ms, and a loop iteration follow each), and it still answers at once.
func TestAWaitIsRawOnlyBriefly(t *testing.T) {
	var ticks atomic.Int64
	s := prepare(t, testHandler, Config{Tick: time.Minute, IdleTick: time.Minute,
		OnTick: func(int64) { ticks.Add(1) }})
	s.run()
	time.Sleep(50 * time.Millisecond) // the first iterations
	before := ticks.Load()
	time.Sleep(300 * time.Millisecond)
	if n := ticks.Load() - before; n > 3 {
		t.Fatalf("a waiting loop ran %d iterations in 300 ms", n)
	}
	c := dial(t, s.addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	write(t, c, get("/during"))
	if resp, body := readResponse(t, c, bufio.NewReader(c), "GET"); resp.StatusCode != 200 || body != "/during" {
		t.Fatalf("a request to a waiting loop: %d %q", resp.StatusCode, body)
	}
}
