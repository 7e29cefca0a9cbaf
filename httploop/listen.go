//go:build linux

package httploop

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Listener is a non-blocking TCP socket bound with SO_REUSEPORT, so that
// every loop of the process can have its own on the same port and the
// kernel spreads new connections across them. A Loop takes it over in New.
//
// Binding and listening are two steps. A bound socket holds the port (no
// other process can bind it, see CheckFree) but accepts nothing: the kernel
// hands connections only to listening sockets, so a client is refused until
// Open. A node binds at start and opens once every shard holds its state.
type Listener struct {
	fd   int
	addr *net.TCPAddr
	open bool
}

// listenBacklog is the accept queue asked of listen(2); the kernel caps it
// at net.core.somaxconn.
const listenBacklog = 1<<16 - 1

// ErrAddrInUse: another socket serves (or holds) the address.
var ErrAddrInUse = errors.New("address already in use by another socket")

// Bind binds addr ("host:port"; port 0 picks one, which Addr reports and
// further loops then bind explicitly) without listening.
//
// The socket has SO_REUSEPORT but not SO_REUSEADDR while it is only bound:
// Linux lets two SO_REUSEADDR sockets share a port while neither listens,
// so without it CheckFree in another process sees the port as taken from
// the moment it is bound, not only once it listens.
func Bind(addr string) (*Listener, error) {
	sa, family, dualStack, err := sockaddr(addr)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return nil, fmt.Errorf("httploop: socket for %s: %w", addr, err)
	}
	err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	if err == nil && dualStack {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err == nil {
		err = unix.Bind(fd, sa)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("httploop: bind %s: %w", addr, err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("httploop: getsockname %s: %w", addr, err)
	}
	return &Listener{fd: fd, addr: tcpAddr(bound)}, nil
}

// Listen binds addr and opens it at once: Bind then Open.
func Listen(addr string) (*Listener, error) {
	ln, err := Bind(addr)
	if err != nil {
		return nil, err
	}
	if err := ln.Open(); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Open starts accepting: from now on the kernel queues connections for
// this socket. It sets SO_REUSEADDR first, so the TIME_WAIT remnants of its
// connections do not make CheckFree refuse the next start on the address.
// Opening twice does nothing.
func (ln *Listener) Open() error {
	if ln.fd < 0 {
		return errors.New("httploop: listener already closed or owned by a loop")
	}
	if ln.open {
		return nil
	}
	if err := unix.SetsockoptInt(ln.fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("httploop: SO_REUSEADDR on %s: %w", ln.addr, err)
	}
	if err := unix.Listen(ln.fd, listenBacklog); err != nil {
		return fmt.Errorf("httploop: listen %s: %w", ln.addr, err)
	}
	ln.open = true
	return nil
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

// CheckFree returns an error wrapping ErrAddrInUse if another socket serves
// addr, or holds it bound for a node that has not opened yet. It binds a
// probe socket without SO_REUSEPORT, which Linux refuses while any such
// socket exists, and closes it. A port of 0 is always free.
//
// The probe has SO_REUSEADDR, so the TIME_WAIT remnants of a stopped
// node's connections do not count as in use (Open gives the listeners
// SO_REUSEADDR for the same reason). What remains is a race between two
// processes that probe within the same instant, before either has bound.
func CheckFree(addr string) error {
	sa, family, dualStack, err := sockaddr(addr)
	if err != nil {
		return err
	}
	if port(sa) == 0 {
		return nil
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return fmt.Errorf("httploop: probe socket for %s: %w", addr, err)
	}
	defer unix.Close(fd)
	err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err == nil && dualStack {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err != nil {
		return fmt.Errorf("httploop: probe socket for %s: %w", addr, err)
	}
	switch err := unix.Bind(fd, sa); {
	case errors.Is(err, unix.EADDRINUSE):
		return fmt.Errorf("%s: %w", addr, ErrAddrInUse)
	case err != nil:
		return fmt.Errorf("httploop: probe bind %s: %w", addr, err)
	}
	return nil
}

// sockaddr resolves addr the way the net package picks a listening socket's
// family: a wildcard host (empty, 0.0.0.0 or ::) is one dual-stack IPv6
// socket when the system has IPv6, an IPv4 host is AF_INET, any other
// AF_INET6.
func sockaddr(addr string) (sa unix.Sockaddr, family int, dualStack bool, err error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, 0, false, fmt.Errorf("httploop: address %q: %w", addr, err)
	}
	if ta.Port < 0 || ta.Port > 65535 {
		return nil, 0, false, fmt.Errorf("httploop: address %q: port out of range", addr)
	}
	if ta.IP == nil || ta.IP.IsUnspecified() {
		if hasIPv6() {
			return &unix.SockaddrInet6{Port: ta.Port}, unix.AF_INET6, true, nil
		}
		return &unix.SockaddrInet4{Port: ta.Port}, unix.AF_INET, false, nil
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return &unix.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ip4)}, unix.AF_INET, false, nil
	}
	s6 := &unix.SockaddrInet6{Port: ta.Port, Addr: [16]byte(ta.IP.To16())}
	if ta.Zone != "" {
		ifi, err := net.InterfaceByName(ta.Zone)
		if err != nil {
			return nil, 0, false, fmt.Errorf("httploop: address %q: zone: %w", addr, err)
		}
		s6.ZoneId = uint32(ifi.Index)
	}
	return s6, unix.AF_INET6, false, nil
}

// hasIPv6 reports whether an IPv6 socket can be made here.
func hasIPv6() bool {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

func port(sa unix.Sockaddr) int {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Port
	case *unix.SockaddrInet6:
		return a.Port
	}
	return 0
}

func tcpAddr(sa unix.Sockaddr) *net.TCPAddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		ta := &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
		if a.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				ta.Zone = ifi.Name
			}
		}
		return ta
	}
	return &net.TCPAddr{}
}
