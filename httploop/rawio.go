//go:build linux

package httploop

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loop's sockets are non-blocking, so a read or write returns at once.
// It issues them as raw system calls: a regular one tells the Go scheduler
// the thread may block, and the scheduler's monitor then hands this thread's
// slot (P) to another thread, which the loop must win back after every
// call — a hand-off per request that costs more than the write itself.
// Blocking calls (epoll_wait) stay regular, so the collector can always stop
// the world.

func rawRead(fd int, p []byte) (int, error)  { return rawIO(unix.SYS_READ, fd, p) }
func rawWrite(fd int, p []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, p) }

func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
