//go:build linux

package ring

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEventfdFlags(t *testing.T) {
	b := openBell(t)
	fl, err := unix.FcntlInt(uintptr(b.fd()), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_NONBLOCK == 0 {
		t.Error("eventfd is blocking")
	}
	fd, err := unix.FcntlInt(uintptr(b.fd()), unix.F_GETFD, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fd&unix.FD_CLOEXEC == 0 {
		t.Error("eventfd is not close-on-exec")
	}
}

func pollIn(t *testing.T, fd int, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(max(time.Until(deadline), 0).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return n == 1 && fds[0].Revents&unix.POLLIN != 0
	}
}

// TestDoorbellWakesPoller blocks a consumer in poll(2) on the eventfd, as an
// epoll loop would, and checks that one push wakes it with one ring.
func TestDoorbellWakesPoller(t *testing.T) {
	d := newDoorbell(t, 16)
	woke := make(chan bool)
	asleep := make(chan struct{})
	go func() {
		if !d.BeginSleep() {
			close(asleep)
			woke <- false
			return
		}
		close(asleep)
		ok := pollIn(t, d.FD(), 5*time.Second)
		d.EndSleep()
		if ok {
			d.Drain()
		}
		woke <- ok
	}()
	<-asleep
	awaitBlockedIn(t, "ring.pollIn(")
	if !d.Push(newMsg(7)) {
		t.Fatal("Push into an empty ring failed")
	}
	if !<-woke {
		t.Fatal("consumer was not woken within 5 s")
	}
	if got := d.Rings(); got != 1 {
		t.Fatalf("Rings = %d, want 1", got)
	}
	if m, ok := d.Ring().Pop(); !ok || m.seq != 7 {
		t.Fatalf("Pop = %+v, %v", m, ok)
	}
	if pollIn(t, d.FD(), 0) {
		t.Fatal("eventfd still readable after Drain")
	}
}

// TestDoorbellAwakeIsSilent checks that pushes to a consumer that has not
// announced sleep leave the eventfd unreadable and make no system call.
func TestDoorbellAwakeIsSilent(t *testing.T) {
	d := newDoorbell(t, 1024)
	for i := range 1000 {
		d.Push(newMsg(uint64(i)))
	}
	if d.Rings() != 0 || pollIn(t, d.FD(), 0) {
		t.Fatalf("awake consumer was rung: Rings %d", d.Rings())
	}
}
