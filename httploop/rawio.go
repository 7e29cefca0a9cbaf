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
// The loop's waits begin raw too, for the same reason: a thread blocked in
// a regular call leaves its P in a system call, and under load the
// scheduler's monitor wakes every 20 µs to take such Ps for the other
// goroutines, leaving the loop to win one back each time it wakes. A raw
// wait keeps the P, but also keeps the world from stopping until it ends
// (the collector's preemption signal usually ends it sooner, epoll_wait
// being never restarted), and a goroutine that holds its P for 10 ms is
// preempted by signal. So a wait is raw for at most rawWaitMs: a loaded
// loop's waits end sooner, and a lightly loaded loop goes on waiting in a
// regular call, giving its P up. Its long idle sleeps park in the
// runtime's poller instead (park.go).

// rawWaitMs bounds a raw wait (ms).
const rawWaitMs = 2

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

// rawEpollWait is epoll_wait(2) as a raw system call (epoll_pwait without
// a signal mask, which every architecture has).
func rawEpollWait(epfd int, events []unix.EpollEvent, msec int) (int, error) {
	n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
