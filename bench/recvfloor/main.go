//go:build linux

// Command recvfloor measures how cheap an HTTP answer can be on this
// machine, whatever the server: a responder that parses nothing and
// answers every request (every "\r\n\r\n") with one fixed 200, on one
// thread, driven either by epoll (a read per readable connection, a write
// per answer: what the data plane's loop does) or by io_uring with
// everything batched (a multishot accept, multishot receives into a ring
// of provided buffers, the answers' sends submitted together, and one
// io_uring_enter a loop iteration for all of it). Driven by the same load
// as bench/baseline and tollgated, its CPU per request is the floor of
// each way of doing I/O, and their difference is the most that moving the
// data plane's loop to io_uring could save it (BENCHMARKS.md).
//
// Usage:
//
//	recvfloor [--listen 127.0.0.1:8083] [--mode epoll|uring] [--body-size 166]
//
// It listens on loopback only and runs until killed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/uring"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8083", "loopback address to listen on")
	mode := flag.String("mode", "epoll", "epoll or uring")
	size := flag.Int("body-size", 166, "bytes of the answer's body (tollgated's admit answer is 166)")
	flag.Parse()
	if err := run(*listen, *mode, *size); err != nil {
		fmt.Fprintf(os.Stderr, "recvfloor: %v\n", err)
		os.Exit(1)
	}
}

func run(listen, mode string, size int) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	return serve(ln.(*net.TCPListener), mode, size)
}

// serve answers on ln until the process ends, on the calling goroutine's
// own OS thread.
func serve(ln *net.TCPListener, mode string, size int) error {
	f, err := ln.File()
	if err != nil {
		return err
	}
	// f stays reachable while the loop runs: its finalizer would close
	// the descriptor the loop serves.
	defer runtime.KeepAlive(f)
	lfd := int(f.Fd())
	if err := unix.SetNonblock(lfd, true); err != nil {
		return err
	}
	answer := []byte("HTTP/1.1 200 OK\r\nServer: recvfloor\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(size) + "\r\n\r\n" + strings.Repeat("x", size))
	runtime.LockOSThread()
	switch mode {
	case "epoll":
		return serveEpoll(lfd, answer)
	case "uring":
		return serveUring(lfd, answer)
	}
	return fmt.Errorf("mode %q: want epoll or uring", mode)
}

// maxFD bounds the connections' descriptors (a request counter each).
const maxFD = 1 << 16

// maxBatch answers are kept back to back (repeated), so k requests read
// together are answered by one write or send of the first k of them.
const maxBatch = 64

func repeated(answer []byte) []byte { return bytes.Repeat(answer, maxBatch) }

// ends counts the request ends ("\r\n\r\n") in b for the connection whose
// last bytes so far are *tail (the end's first three bytes may have come
// in an earlier read). It is all the parsing there is.
func ends(tail *uint32, b []byte) int {
	n := 0
	t := *tail
	for _, c := range b {
		t = t<<8 | uint32(c)
		if t == 0x0d0a0d0a {
			n++
		}
	}
	*tail = t
	return n
}

func serveEpoll(lfd int, answer []byte) error {
	out := repeated(answer)
	ep, err := unix.EpollCreate1(0)
	if err != nil {
		return err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, lfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lfd)}); err != nil {
		return err
	}
	tails := make([]uint32, maxFD)
	events := make([]unix.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if err != nil && err != unix.EINTR {
			return err
		}
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			if fd == lfd {
				for {
					c, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK)
					if err != nil {
						break
					}
					if c >= maxFD {
						unix.Close(c)
						continue
					}
					_ = unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
					tails[c] = 0
					_ = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, c, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c)})
				}
				continue
			}
			m, err := unix.Read(fd, buf)
			if err == unix.EAGAIN {
				continue
			}
			if m <= 0 {
				unix.Close(fd) // closing removes it from the epoll set
				continue
			}
			for k := ends(&tails[fd], buf[:m]); k > 0; k -= maxBatch {
				if _, err := unix.Write(fd, out[:min(k, maxBatch)*len(answer)]); err != nil {
					break // a full socket: the load generator does not let this happen
				}
			}
		}
	}
}

// A completion's user data: the operation in the top byte, the
// descriptor below.
const (
	tagAccept = 1 << 56
	tagRecv   = 2 << 56
	tagSend   = 3 << 56
	tagMask   = 0xff << 56
)

// The provided buffers the receives fill: bufCount of bufSize bytes, as
// buffer group 0.
const (
	bufCount = 1024
	bufSize  = 4096
	bufGroup = 0
)

func serveUring(lfd int, answer []byte) error {
	out := repeated(answer)
	r, err := uring.New(512, uring.SetupSingleIssuer|uring.SetupDeferTaskrun|uring.SetupCQSize, 4096)
	if err != nil {
		return fmt.Errorf("io_uring: %w", err)
	}
	bufs, err := uring.NewBufferRing(r, bufGroup, bufCount, bufSize)
	if err != nil {
		return fmt.Errorf("io_uring's provided buffers: %w", err)
	}
	// queue submits what is queued when the queue is full.
	queue := func(e uring.SQE) error {
		for !r.Queue(&e) {
			if err := enter(r, 0); err != nil {
				return err
			}
		}
		return nil
	}
	tails := make([]uint32, maxFD)
	arm := func(fd int) error {
		return queue(uring.SQE{Opcode: uring.OpRecv, Flags: uring.SQEBufferSelect, IOPrio: uring.RecvMultishot,
			FD: int32(fd), BufGroup: bufGroup, UserData: tagRecv | uint64(fd)})
	}
	accept := func() error {
		return queue(uring.SQE{Opcode: uring.OpAccept, IOPrio: uring.AcceptMultishot, FD: int32(lfd), UserData: tagAccept})
	}
	if err := accept(); err != nil {
		return err
	}
	for {
		if err := enter(r, 1); err != nil {
			return err
		}
		head, tail := r.Completions()
		returned := false
		for ; head != tail; head++ {
			c := *r.At(head)
			fd := int(c.UserData &^ tagMask)
			switch c.UserData & tagMask {
			case tagAccept:
				if c.Res >= 0 && int(c.Res) < maxFD {
					_ = unix.SetsockoptInt(int(c.Res), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
					tails[c.Res] = 0
					if err := arm(int(c.Res)); err != nil {
						return err
					}
				} else if c.Res >= 0 {
					unix.Close(int(c.Res))
				}
				if c.Flags&uring.CQEFMore == 0 {
					if err := accept(); err != nil {
						return err
					}
				}
			case tagRecv:
				if c.Flags&uring.CQEFBuffer != 0 {
					id := uint16(c.Flags >> uring.CQEBufferShift)
					if c.Res > 0 {
						for k := ends(&tails[fd], bufs.Buffer(id, int(c.Res))); k > 0; k -= maxBatch {
							b := out[:min(k, maxBatch)*len(answer)]
							if err := queue(uring.SQE{Opcode: uring.OpSend, FD: int32(fd), Addr: uint64(uintptr(unsafe.Pointer(&b[0]))),
								Len: uint32(len(b)), OpFlags: unix.MSG_NOSIGNAL, UserData: tagSend | uint64(fd)}); err != nil {
								return err
							}
						}
					}
					bufs.Put(id)
					returned = true
				}
				switch {
				case c.Res == 0 || c.Res < 0 && c.Res != -int32(unix.ENOBUFS):
					unix.Close(fd) // the peer closed, or the connection failed
				case c.Flags&uring.CQEFMore == 0:
					if err := arm(fd); err != nil { // out of buffers: armed again
						return err
					}
				}
			case tagSend:
				// A short or failed send is not retried: the load
				// generator's requests are answered whole or the
				// connection is gone.
			}
		}
		r.Consume(head)
		if returned {
			bufs.Publish()
		}
		runtime.KeepAlive(out)
	}
}

// enter submits the queued entries and waits for wait completions,
// again when interrupted.
func enter(r *uring.Ring, wait uint32) error {
	for {
		err := r.Enter(wait)
		if err != unix.EINTR {
			return err
		}
	}
}
