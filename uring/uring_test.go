//go:build linux

package uring

import (
	"bytes"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestTheStructsHaveTheKernelsLayout: io_uring_sqe is 64 bytes with the
// buffer group at 40, io_uring_cqe 16.
func TestTheStructsHaveTheKernelsLayout(t *testing.T) {
	var e SQE
	if unsafe.Sizeof(e) != 64 || unsafe.Offsetof(e.UserData) != 32 || unsafe.Offsetof(e.BufGroup) != 40 {
		t.Fatalf("SQE: %d bytes, user data at %d, buffer group at %d", unsafe.Sizeof(e), unsafe.Offsetof(e.UserData), unsafe.Offsetof(e.BufGroup))
	}
	if unsafe.Sizeof(CQE{}) != 16 {
		t.Fatalf("CQE: %d bytes", unsafe.Sizeof(CQE{}))
	}
}

func newRing(t *testing.T, entries uint32) *Ring {
	t.Helper()
	r, err := New(entries, 0, 0)
	if err != nil {
		unavailable(t, "io_uring", err)
	}
	t.Cleanup(r.Close)
	return r
}

// unavailable skips where the kernel refuses what is tested, except in CI,
// whose kernel has it: there a refusal fails.
func unavailable(t *testing.T, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s refused: %v", what, err)
	}
	t.Skipf("%s refused here: %v", what, err)
}

func socketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// TestSendsCompleteInOrderAndTheQueueIsBounded: entries queue up to the
// ring's size and no further; one Enter submits them all; each send's
// completion carries its user data and byte count, and the bytes arrive.
func TestSendsCompleteInOrderAndTheQueueIsBounded(t *testing.T) {
	r := newRing(t, 4)
	a, b := socketPair(t)
	msgs := [][]byte{[]byte("one"), []byte("two"), []byte("three"), []byte("four")}
	for i, m := range msgs {
		if !r.Queue(&SQE{Opcode: OpSend, FD: int32(a), Addr: uint64(uintptr(unsafe.Pointer(&m[0]))), Len: uint32(len(m)),
			OpFlags: unix.MSG_DONTWAIT, UserData: uint64(i)}) {
			t.Fatalf("entry %d of %d refused", i, r.Entries())
		}
	}
	if r.Queue(&SQE{Opcode: OpSend}) || r.Pending() != 4 {
		t.Fatalf("a full queue took a fifth entry (pending %d)", r.Pending())
	}
	if err := r.Enter(4); err != nil {
		t.Fatal(err)
	}
	if r.Pending() != 0 {
		t.Fatalf("%d entries still pending after Enter", r.Pending())
	}
	head, tail := r.Completions()
	if tail-head != 4 {
		t.Fatalf("%d completions, want 4", tail-head)
	}
	for i := head; i != tail; i++ {
		c := r.At(i)
		if n := uint32(i - head); c.UserData != uint64(n) || c.Res != int32(len(msgs[n])) {
			t.Fatalf("completion %d: user data %d, result %d", n, c.UserData, c.Res)
		}
	}
	r.Consume(tail)
	if h, t2 := r.Completions(); h != t2 {
		t.Fatal("consumed completions are still there")
	}
	got := make([]byte, 64)
	n, _ := unix.Read(b, got)
	if want := bytes.Join(msgs, nil); !bytes.Equal(got[:n], want) {
		t.Fatalf("received %q, want %q", got[:n], want)
	}
}

// TestAMultishotReceiveFillsProvidedBuffers: one receive entry with a
// buffer group completes once per arrival, naming the buffer it filled,
// and stays armed while buffers are handed back.
func TestAMultishotReceiveFillsProvidedBuffers(t *testing.T) {
	r := newRing(t, 8)
	bufs, err := NewBufferRing(r, 7, 4, 64)
	if err != nil {
		unavailable(t, "provided buffer rings", err)
	}
	a, b := socketPair(t)
	if !r.Queue(&SQE{Opcode: OpRecv, Flags: SQEBufferSelect, IOPrio: RecvMultishot, FD: int32(b), BufGroup: 7, UserData: 42}) {
		t.Fatal("queue refused the receive")
	}
	if err := r.Enter(0); err != nil {
		t.Fatal(err)
	}
	for round, msg := range []string{"first", "second", "third", "fourth", "fifth", "sixth"} {
		if _, err := unix.Write(a, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if err := r.Enter(1); err != nil {
			t.Fatal(err)
		}
		head, tail := r.Completions()
		if tail-head != 1 {
			t.Fatalf("round %d: %d completions", round, tail-head)
		}
		c := r.At(head)
		if c.UserData != 42 || c.Flags&CQEFBuffer == 0 || c.Flags&CQEFMore == 0 {
			t.Fatalf("round %d: completion %+v", round, *c)
		}
		id := uint16(c.Flags >> CQEBufferShift)
		if got := string(bufs.Buffer(id, int(c.Res))); got != msg {
			t.Fatalf("round %d: buffer %d holds %q", round, id, got)
		}
		r.Consume(tail)
		// More rounds than buffers: each goes back after it is read.
		bufs.Put(id)
		bufs.Publish()
	}
}
