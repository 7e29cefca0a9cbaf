//go:build unix

package ring

import (
	"time"

	"golang.org/x/sys/unix"
)

// wait blocks in poll(2) until fd() is readable or timeout passes. It does
// not drain. poll is restarted after EINTR, which the Go runtime's
// preemption signals make common, with the time that is left.
func (b *bell) wait(timeout time.Duration) bool {
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	fds := [1]unix.PollFd{{Fd: int32(b.fd()), Events: unix.POLLIN}}
	for {
		ms := -1
		if timeout >= 0 {
			left := time.Until(deadline)
			if left < 0 {
				left = 0
			}
			// Round up so that a sub-millisecond wait does not become a
			// busy poll with a zero timeout.
			ms = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		n, err := unix.Poll(fds[:], ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
	}
}
