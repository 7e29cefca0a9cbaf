//go:build linux

package httploop

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestListen(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ln.Addr().Port == 0 {
		t.Fatal("no port")
	}
	flags, err := unix.FcntlInt(uintptr(ln.fd), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("listener blocking (flags %#x, %v)", flags, err)
	}
	if fdFlags, _ := unix.FcntlInt(uintptr(ln.fd), unix.F_GETFD, 0); fdFlags&unix.FD_CLOEXEC == 0 {
		t.Fatal("listener inherited by children")
	}
	// The same port again: that is what SO_REUSEPORT is for.
	ln2, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := ln2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if ln.Close() == nil {
		t.Fatal("second Close succeeded")
	}
	if _, err := New(ln, testHandler, Config{}); err == nil {
		t.Fatal("New took a closed listener")
	}
	if _, err := Listen("127.0.0.1:notaport"); err == nil {
		t.Fatal("bad address accepted")
	}
}
