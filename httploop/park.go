package httploop

import (
	"errors"
	"os"
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

// parker parks the loop's goroutine in the runtime's poller until the
// loop's epoll set has an event or a timeout passes.
type parker struct {
	f  *os.File // a duplicate of the epoll fd, known to the runtime's poller
	rc syscall.RawConn
}

func newParker(epfd int) (*parker, error) {
	f, err := pollfile.Open(epfd, "epoll")
	if err != nil {
		return nil, err
	}
	p := &parker{f: f}
	if p.rc, err = f.SyscallConn(); err != nil {
		f.Close()
		return nil, err
	}
	return p, nil
}

// wait is epoll_wait(epfd, events, timeout) with the goroutine parked in
// the runtime's poller meanwhile. The set is polled before the first
// park, so an event that came before the call is never waited past.
func (p *parker) wait(epfd int, events []unix.EpollEvent, timeout time.Duration) (n int, err error) {
	if err := p.f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	rerr := p.rc.Read(func(uintptr) bool {
		n, err = unix.EpollWait(epfd, events, 0)
		return n != 0 || err != nil && err != unix.EINTR
	})
	if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
		return 0, rerr
	}
	return max(n, 0), err
}

func (p *parker) close() { p.f.Close() }
