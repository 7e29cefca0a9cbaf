package httploop

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/pollfile"
)

// A loop with nothing due sleeps for IdleTick. Asleep in epoll_wait, its
// thread keeps the Go runtime's P in a system call, and the runtime's
// monitor thread (sysmon) wakes every 20 µs or so, then less and less
// often, until it takes that P back about 10 ms later — after every idle
// tick of every shard: dozens of wake-ups a tick, most of what an idle
// daemon spends. Parked in the runtime's own poller instead — on the epoll
// instance itself, which is readable whenever its set has an event — the
// goroutine gives its P up at once and the monitor sleeps until the next
// timer. Only idle sleeps park: a busy loop's short waits keep the direct
// epoll_wait, whose wake-up costs no hand-over between threads.

// Registered in the runtime's poller, the epoll set is watched all the
// time, not only while the loop is parked: every event that reaches the set
// also wakes the runtime's poller thread, which finds no goroutine parked on
// it and sleeps again — under load, thousands of wake-ups a second, each a
// context switch on the busy loop's CPU (a fifth of that CPU under wrk). So
// the duplicate is registered when the loop parks and dropped once the loop
// has not parked for parkHold: a loaded loop pays nothing, and a lightly
// loaded one that parks between requests does not register per request.

// parkHold is how long the registration outlives the last park.
const parkHold = 100 * time.Millisecond

// parker parks the loop's goroutine in the runtime's poller until the
// loop's epoll set has an event or a timeout passes.
type parker struct {
	epfd     int
	f        *os.File // a duplicate of epfd the runtime's poller watches; nil when not registered
	rc       syscall.RawConn
	parkedAt int64       // Unix ns when the last park ended
	watched  atomic.Bool // f != nil, for readers off the loop thread (tests)
}

// newParker checks that the runtime's poller takes epfd, and leaves it
// registered: a new loop is idle.
func newParker(epfd int) (*parker, error) {
	p := &parker{epfd: epfd}
	if err := p.register(); err != nil {
		return nil, err
	}
	p.parkedAt = time.Now().UnixNano()
	return p, nil
}

func (p *parker) register() error {
	f, err := pollfile.Open(p.epfd, "epoll")
	if err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return err
	}
	p.f, p.rc = f, rc
	p.watched.Store(true)
	return nil
}

// wait is epoll_wait(epfd, events, timeout) with the goroutine parked in
// the runtime's poller meanwhile. The set is polled before the first
// park, so an event that came before the call is never waited past.
func (p *parker) wait(events []unix.EpollEvent, timeout time.Duration) (n int, err error) {
	if p.f == nil {
		if err := p.register(); err != nil {
			// The poller took the fd at start; if it refuses now
			// (out of descriptors), sleep in epoll_wait instead.
			return unix.EpollWait(p.epfd, events, int(timeout/time.Millisecond))
		}
	}
	if err := p.f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	rerr := p.rc.Read(func(uintptr) bool {
		n, err = unix.EpollWait(p.epfd, events, 0)
		return n != 0 || err != nil && err != unix.EINTR
	})
	// The hold runs from the park's end: a loop idle for many IdleTicks
	// stays registered across them.
	p.parkedAt = time.Now().UnixNano()
	if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
		return 0, rerr
	}
	return max(n, 0), err
}

// settle drops the registration once the loop has not parked for
// parkHold; now is the loop's clock.
func (p *parker) settle(now int64) {
	if p.f != nil && now-p.parkedAt > int64(parkHold) {
		p.unregister()
	}
}

func (p *parker) unregister() {
	p.f.Close()
	p.f, p.rc = nil, nil
	p.watched.Store(false)
}

func (p *parker) close() {
	if p.f != nil {
		p.unregister()
	}
}
