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
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
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

// The io_uring ABI (include/uapi/linux/io_uring.h) this program uses.
const (
	sysIoUringSetup    = 425
	sysIoUringEnter    = 426
	sysIoUringRegister = 427

	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13
	setupCQSize       = 1 << 3

	opAccept = 13
	opSend   = 26
	opRecv   = 27

	acceptMultishot = 1 << 0 // sqe.ioprio of an accept
	recvMultishot   = 1 << 1 // sqe.ioprio of a recv
	sqeBufferSelect = 1 << 5 // sqe.flags

	cqeFBuffer  = 1 << 0
	cqeFMore    = 1 << 1
	bufferShift = 16

	enterGetEvents = 1

	registerPbufRing = 22

	offCQRing = 0x8000000
	offSQEs   = 0x10000000
)

type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufGroup    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	_           uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  [10]uint32
	cqOff                                                                  [10]uint32
}

type bufReg struct {
	ringAddr    uint64
	ringEntries uint32
	bgid        uint16
	flags       uint16
	resv        [3]uint64
}

type ring struct {
	fd             int
	sqTail, sqMask *uint32
	sqHead         *uint32
	sqArray        []uint32
	sqes           []sqe
	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []cqe
	pending        uint32 // SQEs queued since the last enter
}

func newRing(entries uint32) (*ring, error) {
	p := params{flags: setupSingleIssuer | setupDeferTaskrun | setupCQSize, cqEntries: entries * 8}
	fd, _, errno := unix.Syscall(sysIoUringSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	sq, err := unix.Mmap(int(fd), 0, int(p.sqOff[6]+p.sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	cq, err := unix.Mmap(int(fd), offCQRing, int(p.cqOff[5]+p.cqEntries*uint32(unsafe.Sizeof(cqe{}))), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	se, err := unix.Mmap(int(fd), offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	return &ring{
		fd:      int(fd),
		sqHead:  u32(sq, p.sqOff[0]),
		sqTail:  u32(sq, p.sqOff[1]),
		sqMask:  u32(sq, p.sqOff[2]),
		sqArray: unsafe.Slice(u32(sq, p.sqOff[6]), p.sqEntries),
		sqes:    unsafe.Slice((*sqe)(unsafe.Pointer(&se[0])), p.sqEntries),
		cqHead:  u32(cq, p.cqOff[0]),
		cqTail:  u32(cq, p.cqOff[1]),
		cqMask:  *u32(cq, p.cqOff[2]),
		cqes:    unsafe.Slice((*cqe)(unsafe.Pointer(&cq[p.cqOff[5]])), p.cqEntries),
	}, nil
}

// queue takes the next SQE; the ring is entered once it is full.
func (r *ring) queue(e sqe) error {
	if r.pending == uint32(len(r.sqes)) {
		if err := r.enter(0); err != nil {
			return err
		}
	}
	tail := *r.sqTail
	idx := tail & *r.sqMask
	r.sqes[idx] = e
	r.sqArray[idx] = idx
	atomic.StoreUint32(r.sqTail, tail+1)
	r.pending++
	return nil
}

// enter submits what is queued and waits for at least wait completions.
func (r *ring) enter(wait uint32) error {
	for {
		_, _, errno := unix.Syscall6(sysIoUringEnter, uintptr(r.fd), uintptr(r.pending), uintptr(wait), enterGetEvents, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		r.pending = 0
		return nil
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

// The provided buffers the receives fill: bufCount of bufSize bytes.
const (
	bufCount = 1024
	bufSize  = 4096
	bufGroup = 0
)

// bufRing is the kernel-shared ring of provided buffers: 16-byte entries
// {addr u64, len u32, bid u16, resv u16}, the ring's tail in the first
// entry's resv.
type bufRing struct {
	mem  []byte
	data []byte
	tail uint16
}

func newBufRing(r *ring) (*bufRing, error) {
	mem, err := unix.Mmap(-1, 0, bufCount*16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	b := &bufRing{mem: mem, data: make([]byte, bufCount*bufSize)}
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), ringEntries: bufCount, bgid: bufGroup}
	if _, _, errno := unix.Syscall6(sysIoUringRegister, uintptr(r.fd), registerPbufRing, uintptr(unsafe.Pointer(&reg)), 1, 0, 0); errno != 0 {
		return nil, fmt.Errorf("registering the buffer ring: %w", errno)
	}
	for id := range bufCount {
		b.put(uint16(id))
	}
	b.publish()
	return b, nil
}

// put gives buffer id back to the kernel; publish makes the puts visible.
func (b *bufRing) put(id uint16) {
	e := b.mem[int(b.tail&(bufCount-1))*16:]
	*(*uint64)(unsafe.Pointer(&e[0])) = uint64(uintptr(unsafe.Pointer(&b.data[int(id)*bufSize])))
	*(*uint32)(unsafe.Pointer(&e[8])) = bufSize
	*(*uint16)(unsafe.Pointer(&e[12])) = id
	b.tail++
}

func (b *bufRing) publish() {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b.mem[12])), uint32(b.tail)<<16|uint32(*(*uint16)(unsafe.Pointer(&b.mem[12]))))
}

func (b *bufRing) buffer(id uint16, n int) []byte { return b.data[int(id)*bufSize:][:n] }

func serveUring(lfd int, answer []byte) error {
	out := repeated(answer)
	r, err := newRing(512)
	if err != nil {
		return err
	}
	bufs, err := newBufRing(r)
	if err != nil {
		return err
	}
	tails := make([]uint32, maxFD)
	arm := func(fd int) error {
		return r.queue(sqe{opcode: opRecv, flags: sqeBufferSelect, ioprio: recvMultishot, fd: int32(fd),
			bufGroup: bufGroup, userData: tagRecv | uint64(fd)})
	}
	accept := func() error {
		return r.queue(sqe{opcode: opAccept, ioprio: acceptMultishot, fd: int32(lfd), userData: tagAccept})
	}
	if err := accept(); err != nil {
		return err
	}
	for {
		if err := r.enter(1); err != nil {
			return err
		}
		head := atomic.LoadUint32(r.cqHead)
		tail := atomic.LoadUint32(r.cqTail)
		returned := false
		for ; head != tail; head++ {
			c := r.cqes[head&r.cqMask]
			fd := int(c.userData &^ tagMask)
			switch c.userData & tagMask {
			case tagAccept:
				if c.res >= 0 && int(c.res) < maxFD {
					_ = unix.SetsockoptInt(int(c.res), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
					tails[c.res] = 0
					if err := arm(int(c.res)); err != nil {
						return err
					}
				} else if c.res >= 0 {
					unix.Close(int(c.res))
				}
				if c.flags&cqeFMore == 0 {
					if err := accept(); err != nil {
						return err
					}
				}
			case tagRecv:
				if c.flags&cqeFBuffer != 0 {
					id := uint16(c.flags >> bufferShift)
					if c.res > 0 {
						for k := ends(&tails[fd], bufs.buffer(id, int(c.res))); k > 0; k -= maxBatch {
							b := out[:min(k, maxBatch)*len(answer)]
							if err := r.queue(sqe{opcode: opSend, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(&b[0]))),
								len: uint32(len(b)), opFlags: unix.MSG_NOSIGNAL, userData: tagSend | uint64(fd)}); err != nil {
								return err
							}
						}
					}
					bufs.put(id)
					returned = true
				}
				switch {
				case c.res == 0 || c.res < 0 && c.res != -int32(unix.ENOBUFS):
					unix.Close(fd) // the peer closed, or the connection failed
				case c.flags&cqeFMore == 0:
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
		atomic.StoreUint32(r.cqHead, head)
		if returned {
			bufs.publish()
		}
		runtime.KeepAlive(out)
	}
}
