//go:build linux

package httploop

import (
	"bufio"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// TestAnIdleLoopParksAndStillAnswers: a loop whose handler has nothing due
// sleeps its IdleTick (here an hour) parked in the runtime's poller, and
// every event of its epoll set ends that sleep: a new connection, a request
// on a connection already open, a drain. Were the parked loop deaf to its
// set, the request would wait the hour and the test's client time out.
func TestAnIdleLoopParksAndStillAnswers(t *testing.T) {
	var ticks atomic.Int64
	s := prepare(t, testHandler, Config{Tick: 10 * time.Millisecond, IdleTick: time.Hour,
		Quiet: func() bool { return true }, OnTick: func(int64) { ticks.Add(1) }})
	if s.park == nil {
		t.Fatal("the runtime's poller refused the loop's epoll fd: idle sleeps would keep sysmon busy")
	}
	s.run()
	// Ticks 10 ms apart while the loop is awake; none for 50 ms once it
	// is parked for its hour.
	asleep := func() {
		t.Helper()
		await.True(t, "the loop parks for its IdleTick", func() bool {
			n := ticks.Load()
			time.Sleep(50 * time.Millisecond)
			return ticks.Load() == n
		})
	}
	asleep()
	c := dial(t, s.addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	write(t, c, get("/first"))
	if resp, body := readResponse(t, c, br, "GET"); resp.StatusCode != 200 || body != "/first" {
		t.Fatalf("a request to a parked loop: %d %q", resp.StatusCode, body)
	}
	asleep()
	write(t, c, get("/again"))
	if resp, body := readResponse(t, c, br, "GET"); resp.StatusCode != 200 || body != "/again" {
		t.Fatalf("a request on an open connection to a parked loop: %d %q", resp.StatusCode, body)
	}
	asleep()
	// The test's cleanup drains the parked loop and waits 5 s for Run to end.
}

// TestABusyLoopLeavesTheRuntimesPollerAndAnIdleOneReturns: the runtime's
// poller watches the loop's epoll set only around parks. A loop that has
// not parked for parkHold (here it ticks every millisecond, never quiet)
// drops the registration, so events on its set stop waking the runtime's
// poller thread; once quiet again it registers and parks, and still
// answers.
func TestABusyLoopLeavesTheRuntimesPollerAndAnIdleOneReturns(t *testing.T) {
	var quiet atomic.Bool
	var ticks atomic.Int64
	quiet.Store(true)
	s := prepare(t, testHandler, Config{Tick: time.Millisecond, IdleTick: time.Hour, Quiet: quiet.Load,
		OnTick: func(int64) { ticks.Add(1) }})
	if s.park == nil || !s.park.watched.Load() {
		t.Fatal("a new loop's epoll set is not in the runtime's poller")
	}
	s.run()
	await.True(t, "the loop parks for its IdleTick", func() bool {
		n := ticks.Load()
		time.Sleep(20 * time.Millisecond)
		return ticks.Load() == n
	})
	// Busy from now on: a request ends the park, and the loop ticks every
	// millisecond without parking again.
	quiet.Store(false)
	c := dial(t, s.addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	write(t, c, get("/wake"))
	readResponse(t, c, br, "GET")
	await.True(t, "a loop that does not park leaves the runtime's poller", func() bool { return !s.park.watched.Load() })
	quiet.Store(true)
	await.True(t, "a quiet loop parks in the runtime's poller again", func() bool { return s.park.watched.Load() })
	write(t, c, get("/after"))
	if resp, body := readResponse(t, c, br, "GET"); resp.StatusCode != 200 || body != "/after" {
		t.Fatalf("a request to a loop parked again: %d %q", resp.StatusCode, body)
	}
}
