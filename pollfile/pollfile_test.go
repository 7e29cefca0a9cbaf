//go:build linux

package pollfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAnEventfdIsPolledAndItsOriginalStaysOpen: a read of the duplicate
// waits in the poller (a deadline ends it) and returns what a write to the
// original put there; the duplicate closes on exec, and closing it leaves
// the original open.
func TestAnEventfdIsPolledAndItsOriginalStaysOpen(t *testing.T) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	f, err := Open(efd, "eventfd")
	if err != nil {
		t.Fatal(err)
	}
	var buf [8]byte
	f.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := f.Read(buf[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read with nothing to read: %v, not the deadline", err)
	}
	f.SetReadDeadline(time.Time{})
	if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Read(buf[:]); n != 8 || err != nil || buf[0] != 1 {
		t.Fatalf("read %d %v %v after a write of 1", n, err, buf)
	}
	// The duplicate does not leak into processes the daemon starts.
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFD, 0) })
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("the duplicate's descriptor flags: %x %v (want close-on-exec)", flags, err)
	}
	f.Close()
	if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatalf("the original after the duplicate closed: %v", err)
	}
}

// TestARegularFileIsRefused: the poller cannot watch a regular file, so a
// wait on it would hold a thread; Open says so instead of returning it.
func TestARegularFileIsRefused(t *testing.T) {
	reg, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if f, err := Open(int(reg.Fd()), "regular"); err == nil {
		f.Close()
		t.Fatal("a regular file was taken as pollable")
	}
}
