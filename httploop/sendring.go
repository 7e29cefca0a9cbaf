//go:build linux

package httploop

import (
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sendRing submits the answers of one loop iteration to their sockets in
// one io_uring_enter(2): a system call costs about as much as a small
// answer's TCP work on a virtual machine with the CPU-buffer-clearing
// mitigations, and a closed loop of many connections answers dozens per
// iteration. Only sends go through it, each with MSG_DONTWAIT: a full
// socket fails at once (the loop then writes the rest itself, as before)
// instead of the kernel holding the send, and every send has completed
// when the enter returns, so no buffer is in the kernel's hands after it.
// Config.BatchSends turns it on. Loop thread only.
type sendRing struct {
	fd      int
	entries uint32
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []ringSQE
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []ringCQE
	maps    [][]byte
}

// ringSQE is struct io_uring_sqe as a send uses it.
type ringSQE struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	msgFlags uint32
	userData uint64
	_        [3]uint64
}

// ringCQE is struct io_uring_cqe.
type ringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// ringParams is struct io_uring_params; the offsets are struct
// io_sqring_offsets and io_cqring_offsets as arrays of their uint32 words.
type ringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  [10]uint32
	cqOff                                                                  [10]uint32
}

const (
	sysIoUringSetup = 425
	sysIoUringEnter = 426
	ringOpSend      = 26
	ringGetEvents   = 1
	ringOffCQ       = 0x8000000
	ringOffSQEs     = 0x10000000

	// Words of the offsets arrays.
	offHead, offTail, offMask = 0, 1, 2
	offSQArray, offCQEs       = 6, 5
)

// newSendRing sets up a ring of entries sends, or returns an error when
// the kernel refuses io_uring.
func newSendRing(entries uint32) (*sendRing, error) {
	var p ringParams
	fd, _, errno := syscall.Syscall(sysIoUringSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, errno
	}
	r := &sendRing{fd: int(fd), entries: p.sqEntries}
	mmap := func(off int64, size int) ([]byte, error) {
		b, err := unix.Mmap(r.fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err == nil {
			r.maps = append(r.maps, b)
		}
		return b, err
	}
	sq, err := mmap(0, int(p.sqOff[offSQArray]+p.sqEntries*4))
	if err != nil {
		r.close()
		return nil, err
	}
	cq, err := mmap(ringOffCQ, int(p.cqOff[offCQEs]+p.cqEntries*uint32(unsafe.Sizeof(ringCQE{}))))
	if err != nil {
		r.close()
		return nil, err
	}
	se, err := mmap(ringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(ringSQE{})))
	if err != nil {
		r.close()
		return nil, err
	}
	word := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail = word(sq, p.sqOff[offHead]), word(sq, p.sqOff[offTail])
	r.sqMask = *word(sq, p.sqOff[offMask])
	r.sqArray = unsafe.Slice(word(sq, p.sqOff[offSQArray]), p.sqEntries)
	r.sqes = unsafe.Slice((*ringSQE)(unsafe.Pointer(&se[0])), p.sqEntries)
	r.cqHead, r.cqTail = word(cq, p.cqOff[offHead]), word(cq, p.cqOff[offTail])
	r.cqMask = *word(cq, p.cqOff[offMask])
	r.cqes = unsafe.Slice((*ringCQE)(unsafe.Pointer(&cq[p.cqOff[offCQEs]])), p.cqEntries)
	return r, nil
}

func (r *sendRing) close() {
	for _, b := range r.maps {
		_ = unix.Munmap(b)
	}
	r.maps = nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// send submits one send per connection of batch (at most entries; each
// conn's out[w:]), waits until all have completed, and stores each
// outcome in res, by position: bytes sent, or a negated errno.
func (r *sendRing) send(batch []*conn, res []int32) error {
	tail := atomic.LoadUint32(r.sqTail)
	for i, c := range batch {
		idx := (tail + uint32(i)) & r.sqMask
		p := c.out[c.w:]
		r.sqes[idx] = ringSQE{
			opcode: ringOpSend, fd: int32(c.fd),
			addr: uint64(uintptr(unsafe.Pointer(&p[0]))), len: uint32(len(p)),
			msgFlags: unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL, userData: uint64(i),
		}
		r.sqArray[idx] = idx
	}
	atomic.StoreUint32(r.sqTail, tail+uint32(len(batch)))
	submit, got := len(batch), 0
	for got < len(batch) {
		// Raw, as the loop's reads and writes are: the sends complete
		// inline (MSG_DONTWAIT), so the enter never sleeps, and the
		// loop's thread keeps its P through a long batch instead of the
		// scheduler's monitor handing it to another thread.
		_, _, errno := syscall.RawSyscall6(sysIoUringEnter, uintptr(r.fd), uintptr(submit),
			uintptr(len(batch)-got), ringGetEvents, 0, 0)
		if errno != 0 && errno != unix.EINTR {
			return errno
		}
		// Whatever the kernel consumed is submitted; an interrupted
		// enter is repeated for the rest and for the completions.
		submit = int(atomic.LoadUint32(r.sqTail) - atomic.LoadUint32(r.sqHead))
		head := atomic.LoadUint32(r.cqHead)
		for end := atomic.LoadUint32(r.cqTail); head != end; head++ {
			e := &r.cqes[head&r.cqMask]
			res[e.userData] = e.res
			got++
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	return nil
}
