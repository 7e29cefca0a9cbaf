//go:build linux

package httploop

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/uring"
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
	ring    *uring.Ring
	entries uint32
}

// newSendRing sets up a ring of entries sends, or returns an error when
// the kernel refuses io_uring.
func newSendRing(entries uint32) (*sendRing, error) {
	r, err := uring.New(entries, 0, 0)
	if err != nil {
		return nil, err
	}
	return &sendRing{ring: r, entries: r.Entries()}, nil
}

func (r *sendRing) close() { r.ring.Close() }

// send submits one send per connection of batch (at most entries; each
// conn's out[w:]), waits until all have completed, and stores each
// outcome in res, by position: bytes sent, or a negated errno.
func (r *sendRing) send(batch []*conn, res []int32) error {
	for i, c := range batch {
		p := c.out[c.w:]
		e := uring.SQE{Opcode: uring.OpSend, FD: int32(c.fd),
			Addr: uint64(uintptr(unsafe.Pointer(&p[0]))), Len: uint32(len(p)),
			OpFlags: unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL, UserData: uint64(i)}
		if !r.ring.Queue(&e) {
			panic("BUG: httploop: a send batch larger than its ring")
		}
	}
	for got := 0; got < len(batch); {
		// Raw, as the loop's reads and writes are: the sends complete
		// inline (MSG_DONTWAIT), so the enter never sleeps, and the
		// loop's thread keeps its P through a long batch instead of the
		// scheduler's monitor handing it to another thread. Whatever the
		// kernel consumed is submitted; an interrupted enter is repeated
		// for the rest and for the completions.
		if err := r.ring.EnterRaw(uint32(len(batch) - got)); err != nil && err != unix.EINTR {
			return err
		}
		head, tail := r.ring.Completions()
		for ; head != tail; head++ {
			e := r.ring.At(head)
			res[e.UserData] = e.Res
			got++
		}
		r.ring.Consume(head)
	}
	return nil
}
