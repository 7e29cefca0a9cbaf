//go:build linux

package httploop

import (
	"bufio"
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
	"golang.org/x/sys/unix"
)

func TestWakeFD(t *testing.T) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) }) // after the loop's cleanup stops it
	var wakes atomic.Int64
	start(t, testHandler, Config{
		Wake:   WakeFD(efd),
		OnWake: func() { wakes.Add(1) },
		Tick:   time.Second, // so only the eventfd can explain a prompt wake
	})
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	for i := range 3 {
		if _, err := unix.Write(efd, one[:]); err != nil {
			t.Fatal(err)
		}
		await.Within(t, 500*time.Millisecond, "OnWake", func() bool { return wakes.Load() > int64(i) })
	}
	// Drained: the descriptor no longer reads as ready. OnWake runs after
	// the loop drained it.
	if _, err := unix.Read(efd, one[:]); err != unix.EAGAIN {
		t.Fatalf("eventfd not drained: %v", err)
	}
}

func TestWakePipe(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := unix.Write(p[1], make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	WakeFD(p[0]).Drain()
	var b [1]byte
	if _, err := unix.Read(p[0], b[:]); err != unix.EAGAIN {
		t.Fatalf("pipe not drained: %v", err)
	}
}

// TestBeforeBlockRunsWhenTheLoopGoesIdle: after each request the loop finds
// nothing more and calls BeforeBlock before it blocks, on the loop thread
// (served is a plain variable the handler writes; the race detector checks
// that claim), with the request's work already done.
func TestBeforeBlockRunsWhenTheLoopGoesIdle(t *testing.T) {
	served := 0 // loop thread only
	var seen atomic.Int64
	s := start(t, func(x *Ctx) {
		served++
		testHandler(x)
	}, Config{
		BeforeBlock: func() { seen.Store(int64(served)) },
		Tick:        time.Second, // the loop blocks for a second between requests
	})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	for i := 1; i <= 3; i++ {
		write(t, c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
		readResponse(t, c, br, "GET")
		await.Within(t, 500*time.Millisecond, "BeforeBlock after request "+strconv.Itoa(i),
			func() bool { return seen.Load() == int64(i) })
	}
}
