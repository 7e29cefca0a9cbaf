//go:build linux

// Package uring is the part of io_uring(7) the project uses, without
// liburing: a ring set up by io_uring_setup(2) with its queues mapped,
// submission entries queued and handed to the kernel by io_uring_enter(2),
// and completions read in the order the kernel posted them.
//
// One thread owns a ring: nothing here is safe for concurrent use. The
// memory ordering is the kernel's protocol: entries are written before the
// submission tail is stored (atomically), and the completion tail is
// loaded (atomically) before the entries below it are read.
package uring

import (
	"errors"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SQE is struct io_uring_sqe. Union members are named for the use this
// project makes of them.
type SQE struct {
	Opcode   uint8
	Flags    uint8  // IOSQE_*
	IOPrio   uint16 // for accept and recv: their multishot bits
	FD       int32
	Off      uint64
	Addr     uint64
	Len      uint32
	OpFlags  uint32 // msg_flags of a send or recv, accept_flags of an accept
	UserData uint64
	BufGroup uint16 // the provided-buffer group of a buffer-select recv
	_        uint16 // personality
	_        int32  // splice_fd_in
	_        [2]uint64
}

// CQE is struct io_uring_cqe.
type CQE struct {
	UserData uint64
	Res      int32 // a result, or a negated errno
	Flags    uint32
}

// The ABI values used here (include/uapi/linux/io_uring.h).
const (
	OpAccept = 13
	OpSend   = 26
	OpRecv   = 27

	SQEBufferSelect = 1 << 5 // Flags: the kernel picks a buffer from BufGroup

	AcceptMultishot = 1 << 0 // IOPrio of an accept: one entry, a completion per connection
	RecvMultishot   = 1 << 1 // IOPrio of a recv: one entry, a completion per receive

	CQEFBuffer     = 1 << 0 // Flags: the upper 16 bits name the buffer used
	CQEFMore       = 1 << 1 // Flags: the multishot entry stays armed
	CQEBufferShift = 16

	SetupCQSize       = 1 << 3  // New's cqEntries sizes the completion queue
	SetupSingleIssuer = 1 << 12 // only the creating thread submits
	SetupDeferTaskrun = 1 << 13 // completions are posted while entering only

	sysSetup    = 425
	sysEnter    = 426
	sysRegister = 427

	enterGetEvents   = 1
	registerPbufRing = 22

	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	// Words of struct io_sqring_offsets and io_cqring_offsets.
	offHead, offTail, offMask = 0, 1, 2
	offSQArray, offCQEs       = 6, 5
)

// params is struct io_uring_params, the offsets as arrays of words.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  [10]uint32
	cqOff                                                                  [10]uint32
}

// Ring is one io_uring instance with its queues mapped.
type Ring struct {
	fd      int
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []SQE
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []CQE
	maps    [][]byte
}

// New sets up a ring of entries submission entries with the Setup* flags;
// cqEntries sizes the completion queue when flags has SetupCQSize. The
// error is the kernel's when it refuses io_uring (old, or disabled).
func New(entries, flags, cqEntries uint32) (*Ring, error) {
	p := params{flags: flags, cqEntries: cqEntries}
	fd, _, errno := syscall.Syscall(sysSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, errno
	}
	r := &Ring{fd: int(fd)}
	mmap := func(off int64, size int) ([]byte, error) {
		b, err := unix.Mmap(r.fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err == nil {
			r.maps = append(r.maps, b)
		}
		return b, err
	}
	sq, err := mmap(0, int(p.sqOff[offSQArray]+p.sqEntries*4))
	if err != nil {
		r.Close()
		return nil, err
	}
	cq, err := mmap(offCQRing, int(p.cqOff[offCQEs]+p.cqEntries*uint32(unsafe.Sizeof(CQE{}))))
	if err != nil {
		r.Close()
		return nil, err
	}
	se, err := mmap(offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(SQE{})))
	if err != nil {
		r.Close()
		return nil, err
	}
	word := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail = word(sq, p.sqOff[offHead]), word(sq, p.sqOff[offTail])
	r.sqMask = *word(sq, p.sqOff[offMask])
	r.sqArray = unsafe.Slice(word(sq, p.sqOff[offSQArray]), p.sqEntries)
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&se[0])), p.sqEntries)
	r.cqHead, r.cqTail = word(cq, p.cqOff[offHead]), word(cq, p.cqOff[offTail])
	r.cqMask = *word(cq, p.cqOff[offMask])
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&cq[p.cqOff[offCQEs]])), p.cqEntries)
	return r, nil
}

// FD is the ring's descriptor.
func (r *Ring) FD() int { return r.fd }

// Entries is the submission queue's size: at most this many entries are
// pending at once.
func (r *Ring) Entries() uint32 { return uint32(len(r.sqes)) }

// Close unmaps the queues and closes the ring; entries in flight are
// cancelled by the kernel.
func (r *Ring) Close() {
	for _, b := range r.maps {
		_ = unix.Munmap(b)
	}
	r.maps = nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// Queue puts e in the submission queue, for the next Enter. It reports
// false, queuing nothing, when Entries entries are pending already.
func (r *Ring) Queue(e *SQE) bool {
	tail := *r.sqTail // only this thread stores it
	if tail-atomic.LoadUint32(r.sqHead) == uint32(len(r.sqes)) {
		return false
	}
	i := tail & r.sqMask
	r.sqes[i] = *e
	r.sqArray[i] = i
	atomic.StoreUint32(r.sqTail, tail+1)
	return true
}

// Pending is how many queued entries the kernel has not consumed yet.
func (r *Ring) Pending() uint32 { return *r.sqTail - atomic.LoadUint32(r.sqHead) }

// Enter submits the pending entries and waits until at least wait
// completions are posted, giving up the thread's P while it waits.
// unix.EINTR comes back as itself: the caller enters again.
func (r *Ring) Enter(wait uint32) error {
	_, _, errno := syscall.Syscall6(sysEnter, uintptr(r.fd), uintptr(r.Pending()), uintptr(wait), enterGetEvents, 0, 0)
	return errnoErr(errno)
}

// EnterRaw is Enter without telling the Go scheduler: for a thread that
// must keep its P, and only when the wait is short (entries that complete
// inline).
func (r *Ring) EnterRaw(wait uint32) error {
	_, _, errno := syscall.RawSyscall6(sysEnter, uintptr(r.fd), uintptr(r.Pending()), uintptr(wait), enterGetEvents, 0, 0)
	return errnoErr(errno)
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Completions returns the posted completions not yet consumed, as the
// indices [head, tail) for At; Consume(tail) hands their slots back.
func (r *Ring) Completions() (head, tail uint32) {
	return *r.cqHead, atomic.LoadUint32(r.cqTail)
}

// At is the completion at index i of Completions.
func (r *Ring) At(i uint32) *CQE { return &r.cqes[i&r.cqMask] }

// Consume hands back the completions below head.
func (r *Ring) Consume(head uint32) { atomic.StoreUint32(r.cqHead, head) }

// BufferRing is a group of provided buffers: count buffers of size bytes
// that receives with SQEBufferSelect fill, each named in its completion
// (CQEFBuffer) and handed back with Put and Publish once read.
type BufferRing struct {
	ring []byte // count struct io_uring_buf; the tail is the first one's last word
	data []byte
	size int
	mask uint16
	tail uint16
}

// NewBufferRing registers count (a power of two, at most 32768) buffers of
// size bytes with r as group, all given to the kernel.
func NewBufferRing(r *Ring, group uint16, count, size int) (*BufferRing, error) {
	if count <= 0 || count&(count-1) != 0 || count > 1<<15 || size <= 0 {
		return nil, errors.New("uring: a buffer ring holds a power of two of buffers, at most 32768")
	}
	// Page-aligned, as the kernel requires: a mapping of its own.
	mem, err := unix.Mmap(-1, 0, count*16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	b := &BufferRing{ring: mem, data: make([]byte, count*size), size: size, mask: uint16(count - 1)}
	reg := struct {
		ringAddr    uint64
		ringEntries uint32
		bgid        uint16
		flags       uint16
		resv        [3]uint64
	}{ringAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), ringEntries: uint32(count), bgid: group}
	if _, _, errno := syscall.Syscall6(sysRegister, uintptr(r.fd), registerPbufRing, uintptr(unsafe.Pointer(&reg)), 1, 0, 0); errno != 0 {
		_ = unix.Munmap(mem)
		return nil, errno
	}
	for id := range count {
		b.Put(uint16(id))
	}
	b.Publish()
	return b, nil
}

// Buffer is the first n bytes of buffer id, as a completion reported it.
func (b *BufferRing) Buffer(id uint16, n int) []byte { return b.data[int(id)*b.size:][:n] }

// Put hands buffer id back; the kernel sees it after Publish.
func (b *BufferRing) Put(id uint16) {
	e := b.ring[int(b.tail&b.mask)*16:]
	*(*uint64)(unsafe.Pointer(&e[0])) = uint64(uintptr(unsafe.Pointer(&b.data[int(id)*b.size])))
	*(*uint32)(unsafe.Pointer(&e[8])) = uint32(b.size)
	*(*uint16)(unsafe.Pointer(&e[12])) = id
	b.tail++
}

// Publish stores the ring's tail, after the entries Put wrote. The tail is
// the upper half of the word whose lower half is entry 0's buffer id, so
// one atomic store of that word publishes it.
func (b *BufferRing) Publish() {
	w := (*uint32)(unsafe.Pointer(&b.ring[12]))
	atomic.StoreUint32(w, uint32(b.tail)<<16|*w&0xffff)
}
