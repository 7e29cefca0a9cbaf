//go:build linux

package httploop

import "golang.org/x/sys/unix"

// Waker is a doorbell another thread rings to wake the loop, with the
// sleeping handshake of ring.Doorbell: BeginSleep before blocking (false
// means there is work already, so do not block), EndSleep after, Drain once
// FD has been reported readable. The loop calls BeginSleep every iteration,
// whether or not it will block, and calls OnWake after any iteration in
// which BeginSleep said no or FD was readable.
type Waker interface {
	FD() int
	BeginSleep() bool
	EndSleep()
	Drain()
}

// WakeFD adapts a bare non-blocking eventfd, or the read end of a
// non-blocking pipe, whose producers signal on every message rather than
// only to a sleeping consumer. The caller keeps ownership of fd.
func WakeFD(fd int) Waker {
	return &fdWaker{fd: fd}
}

type fdWaker struct {
	fd  int
	buf [64]byte // a field: a slice of a local passed to read escapes under -race
}

func (w *fdWaker) FD() int          { return w.fd }
func (w *fdWaker) BeginSleep() bool { return true }
func (w *fdWaker) EndSleep()        {}

// Drain reads until the descriptor is empty: one read for an eventfd, as
// many as it takes for a pipe.
func (w *fdWaker) Drain() {
	for {
		n, err := unix.Read(w.fd, w.buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n < len(w.buf) {
			return
		}
	}
}
