//go:build unix && !linux

package ring

import (
	"errors"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// bell is a non-blocking pipe where there is no eventfd. A ring writes one
// byte; a full pipe already means readable, so its EAGAIN is ignored. A drain
// reads until the pipe is empty.
//
// The buffers are fields, not locals, because under the race detector a
// slice passed to unix.Read or unix.Write escapes to the heap.
type bell struct {
	r, w   int
	one    [1]byte  // what a ring writes; read only by the producer
	sink   [64]byte // where a drain reads into; written only by the consumer
	closed atomic.Bool
}

func (b *bell) open() error {
	var p [2]int
	// Hold ForkLock like the standard library does, so a concurrent fork
	// cannot inherit the descriptors before they are marked close-on-exec.
	syscall.ForkLock.RLock()
	err := unix.Pipe(p[:])
	if err == nil {
		unix.CloseOnExec(p[0])
		unix.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return err
	}
	for _, fd := range p {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return err
		}
	}
	b.r, b.w = p[0], p[1]
	return nil
}

func (b *bell) fd() int {
	return b.r
}

func (b *bell) ring() {
	_, _ = unix.Write(b.w, b.one[:])
}

func (b *bell) drain() {
	for {
		n, err := unix.Read(b.r, b.sink[:])
		if err == unix.EINTR || n == len(b.sink) {
			continue
		}
		return
	}
}

func (b *bell) close() error {
	if b.closed.Swap(true) {
		return errClosed
	}
	return errors.Join(unix.Close(b.r), unix.Close(b.w))
}
