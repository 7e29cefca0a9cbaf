//go:build linux

package httploop

import (
	"errors"
	"fmt"
	"net"

	"github.com/libp2p/go-reuseport"
	"golang.org/x/sys/unix"
)

// Listener is a non-blocking listening TCP socket bound with SO_REUSEPORT,
// so that every loop of the process can have its own on the same port and
// the kernel spreads new connections across them. A Loop takes it over in New.
type Listener struct {
	fd   int
	addr *net.TCPAddr
}

// Listen binds addr ("host:port"; port 0 picks one, which Addr reports and
// further loops then bind explicitly).
func Listen(addr string) (*Listener, error) {
	ln, err := reuseport.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("httploop: listener for %s is %T, not TCP", addr, ln)
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return nil, err
	}
	// Take a descriptor of our own for the same socket: the runtime's stays
	// registered with its netpoller until ln.Close, which then closes only
	// that descriptor, not the socket.
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) {
		fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, fmt.Errorf("httploop: dup listener: %w", dupErr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Listener{fd: fd, addr: tl.Addr().(*net.TCPAddr)}, nil
}

// Addr is the bound address.
func (ln *Listener) Addr() *net.TCPAddr {
	return ln.addr
}

// Close closes a listener that was never given to a Loop (a Loop closes its
// own when it drains or stops).
func (ln *Listener) Close() error {
	if ln.fd < 0 {
		return errors.New("httploop: listener already closed or owned by a loop")
	}
	fd := ln.fd
	ln.fd = -1
	return unix.Close(fd)
}
