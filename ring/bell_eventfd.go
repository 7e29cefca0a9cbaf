//go:build linux

package ring

import (
	"encoding/binary"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// bell is a Linux eventfd. Its 64-bit counter makes it readable while
// non-zero, and a read returns and clears the whole count, so any number of
// rings between two drains collapse into one wake-up and one read.
//
// The read and write buffers are fields, not locals, because under the race
// detector a slice passed to unix.Read or unix.Write escapes to the heap.
type bell struct {
	efd    int
	one    [8]byte // the value every ring adds; read only by the producer
	count  [8]byte // where a drain reads into; written only by the consumer
	closed atomic.Bool
}

func (b *bell) open() error {
	// Non-blocking so that neither side can ever stall in the kernel on it;
	// close-on-exec so that a child process does not inherit it.
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	b.efd = fd
	binary.NativeEndian.PutUint64(b.one[:], 1)
	return nil
}

func (b *bell) fd() int {
	return b.efd
}

func (b *bell) ring() {
	// EAGAIN would mean the counter is at its 2^64-2 limit, so the
	// descriptor is readable already; nothing else can fail on a live
	// eventfd, so the result is not needed.
	_, _ = unix.Write(b.efd, b.one[:])
}

func (b *bell) drain() {
	// EAGAIN means nobody rang since the last drain: already clear.
	for {
		_, err := unix.Read(b.efd, b.count[:])
		if err != unix.EINTR {
			return
		}
	}
}

func (b *bell) close() error {
	if b.closed.Swap(true) {
		return errClosed
	}
	return unix.Close(b.efd)
}
