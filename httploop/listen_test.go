//go:build linux

package httploop

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestBoundListenerRefusesUntilOpen: a bound listener holds its port but
// the kernel refuses connections to it until Open; New will not take it
// before then.
func TestBoundListenerRefusesUntilOpen(t *testing.T) {
	ln, err := Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("dial a bound, unopened listener: %v, want connection refused", err)
	}
	if _, err := New(ln, testHandler, Config{}); err == nil {
		t.Fatal("New took a listener that does not listen")
	}
	if err := ln.Open(); err != nil {
		t.Fatal(err)
	}
	if err := ln.Open(); err != nil {
		t.Fatalf("second Open: %v", err)
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial after Open: %v", err)
	}
	c.Close()
}

// TestCheckFreeSeesAnotherProcessSocket: the probe is refused while any
// socket without our consent holds the address — one that listens, one
// that is only bound for a node that has not opened yet, a plain net
// listener — and passes once they are gone, TIME_WAIT remnants included.
func TestCheckFreeSeesAnotherProcessSocket(t *testing.T) {
	ln, err := Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := CheckFree(addr); !errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("CheckFree of a bound address = %v, want ErrAddrInUse naming %s", err, addr)
	}
	if err := ln.Open(); err != nil {
		t.Fatal(err)
	}
	if err := CheckFree(addr); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("CheckFree of a listening address = %v", err)
	}
	if err := CheckFree("[::]:" + strconv.Itoa(ln.Addr().Port)); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("CheckFree of the wildcard over a loopback listener = %v", err)
	}

	// Leave a server-side TIME_WAIT behind: accept, close first.
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The listening socket is non-blocking: wait in poll(2) until the
	// connection is there to accept.
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(ln.fd), Events: unix.POLLIN}}, 5000); err != nil {
		t.Fatal(err)
	}
	fd, _, err := unix.Accept(ln.fd)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.Read(make([]byte, 1)) // the server's FIN
	c.Close()
	ln.Close()
	if err := CheckFree(addr); err != nil {
		t.Fatalf("CheckFree after the listener closed (TIME_WAIT left) = %v", err)
	}
	if err := CheckFree("127.0.0.1:0"); err != nil {
		t.Fatalf("port 0: %v", err)
	}

	std, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer std.Close()
	if err := CheckFree(std.Addr().String()); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("CheckFree of a net.Listen address = %v", err)
	}
}
