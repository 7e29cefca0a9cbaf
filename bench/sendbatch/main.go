//go:build linux

// Command sendbatch measures what a batched submission would save the
// data plane's answer writes: the sending thread's CPU per answer when each
// of N loopback connections gets its answer by its own write(2), against
// one io_uring_enter(2) submitting the N sends together. Everything else of
// a send (TCP, the loopback delivery, waking the reader) is the same both
// ways, so the difference is the syscall entries and exits a batch saves.
//
// Usage:
//
//	sendbatch [--conns 64] [--sends 2000000] [--size 166] [--rounds 3]
//
// The sender runs on a thread pinned to CPU 1, a reader draining every
// connection on a thread pinned to CPU 0 (with at least 2 CPUs). It prints
// one line per mode and round: "MODE write|uring ns_cpu_per_send=X
// eagain=N".
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/uring"
)

func main() {
	conns := flag.Int("conns", 64, "connections (answers per batch)")
	sends := flag.Int("sends", 2000000, "answers per run")
	size := flag.Int("size", 166, "bytes per answer")
	rounds := flag.Int("rounds", 3, "alternating rounds of both modes")
	flag.Parse()
	if err := run(*conns, *sends, *size, *rounds); err != nil {
		fmt.Fprintf(os.Stderr, "sendbatch: %v\n", err)
		os.Exit(1)
	}
}

func run(n, sends, size, rounds int) error {
	senders, readers, err := pairs(n)
	if err != nil {
		return err
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go drain(readers, &stop, done)
	ring, err := newRing(uint32(n))
	if err != nil {
		return fmt.Errorf("io_uring: %w", err)
	}
	msg := make([]byte, size)
	res := make(chan string)
	go func() {
		runtime.LockOSThread()
		pin(1)
		for r := 0; r < rounds; r++ {
			for _, mode := range []string{"write", "uring"} {
				t0 := threadCPU()
				eagain := 0
				for i := 0; i < sends; i += n {
					if mode == "write" {
						for _, fd := range senders {
							if _, err := unix.Write(fd, msg); err != nil {
								eagain++
							}
						}
					} else {
						eagain += ring.sendAll(senders, msg)
					}
				}
				res <- fmt.Sprintf("MODE %s ns_cpu_per_send=%.1f eagain=%d", mode,
					float64(threadCPU()-t0)/float64(sends), eagain)
			}
		}
		close(res)
	}()
	for line := range res {
		fmt.Println(line)
	}
	stop.Store(true)
	<-done
	return nil
}

// pairs opens n loopback TCP connections and returns the accepted ends
// (the senders) and the dialled ends (the readers), non-blocking.
func pairs(n int) (senders, readers []int, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		s, err := ln.Accept()
		if err != nil {
			return nil, nil, err
		}
		senders = append(senders, dupFD(s))
		readers = append(readers, dupFD(c))
	}
	return senders, readers, nil
}

func dupFD(c net.Conn) int {
	f, _ := c.(*net.TCPConn).File()
	fd := int(f.Fd())
	_ = unix.SetNonblock(fd, true)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return fd
}

// drain reads every reader until stop, on a thread pinned to CPU 0.
func drain(fds []int, stop *atomic.Bool, done chan<- struct{}) {
	runtime.LockOSThread()
	pin(0)
	ep, _ := unix.EpollCreate1(0)
	for i, fd := range fds {
		_ = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)})
	}
	evs := make([]unix.EpollEvent, len(fds))
	buf := make([]byte, 64<<10)
	for !stop.Load() {
		k, _ := unix.EpollWait(ep, evs, 10)
		for _, ev := range evs[:max(k, 0)] {
			for {
				if m, _ := unix.Read(fds[ev.Fd], buf); m < len(buf) {
					break
				}
			}
		}
	}
	close(done)
}

func pin(cpu int) {
	if runtime.NumCPU() < 2 {
		return
	}
	var set unix.CPUSet
	set.Set(cpu)
	_ = unix.SchedSetaffinity(0, &set)
}

func threadCPU() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// ring submits n sends at a time, each batch in one io_uring_enter.
type ring struct{ r *uring.Ring }

func newRing(n uint32) (*ring, error) {
	r, err := uring.New(n, 0, 0)
	if err != nil {
		return nil, err
	}
	return &ring{r}, nil
}

// sendAll sends msg on every fd with one io_uring_enter and returns how
// many sends failed (the socket full: MSG_DONTWAIT makes it fail, not wait).
func (r *ring) sendAll(fds []int, msg []byte) int {
	for i, fd := range fds {
		if !r.r.Queue(&uring.SQE{Opcode: uring.OpSend, FD: int32(fd), Addr: uint64(uintptr(unsafe.Pointer(&msg[0]))),
			Len: uint32(len(msg)), OpFlags: unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL, UserData: uint64(i)}) {
			panic("BUG: sendbatch: more connections than the ring's entries")
		}
	}
	if err := r.r.Enter(uint32(len(fds))); err != nil {
		panic(err)
	}
	failed := 0
	head, tail := r.r.Completions()
	for ; head != tail; head++ {
		if r.r.At(head).Res < 0 {
			failed++
		}
	}
	r.r.Consume(head)
	runtime.KeepAlive(msg)
	return failed
}
