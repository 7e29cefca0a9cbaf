//go:build linux

package httploop

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// Claim is this process's exclusive claim on a TCP port, for as long as
// the process lives: an abstract unix socket named after the port
// (ClaimName), which only one socket of a network namespace can be bound
// to. Binding one is atomic: of two processes that claim the same port at
// the same instant, exactly one gets it.
//
// CheckFree cannot give that: it probes and then the caller binds, and
// two processes that both probe before either binds both pass — and with
// SO_REUSEPORT, which every shard's listener needs, both then bind the
// port and the kernel splits the clients between them. The claim is taken
// before any listener is bound and held until the process exits (or
// Release), so a second daemon on the port stops before it binds at all.
//
// The claim is per port, whatever the host: ":8080", "0.0.0.0:8080",
// "[::]:8080" and "127.0.0.1:8080" overlap (a wildcard listener takes a
// specific address's connections, and with SO_REUSEPORT they may be bound
// side by side), so they claim the same name. Two daemons on one port of
// two different addresses of a host therefore cannot run in one network
// namespace. Abstract sockets have no permissions: any local process can
// bind the name first and so keep tollgated off the port, but it cannot
// serve the port through the claim.
type Claim struct {
	fd   int
	name string
}

// ClaimName is the abstract socket name (without its leading NUL, shown
// as "@" by ss(8)) that claims port.
func ClaimName(port int) string { return "tollgated/tcp/" + strconv.Itoa(port) }

// ErrClaimed: another process holds the claim on the port.
var ErrClaimed = errors.New("the port is claimed by another process")

// ClaimPort claims the port of addr ("host:port") for this process. A port
// of 0 (the kernel picks a free one) needs no claim: it returns nil, nil.
// It returns an error wrapping ErrClaimed (and ErrAddrInUse) when another
// process holds the claim.
func ClaimPort(addr string) (*Claim, error) {
	sa, _, _, err := sockaddr(addr)
	if err != nil {
		return nil, err
	}
	p := port(sa)
	if p == 0 {
		return nil, nil
	}
	name := ClaimName(p)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("httploop: claim socket for %s: %w", addr, err)
	}
	// A leading '@' is the abstract namespace: no file, gone with the
	// process, however it ends.
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + name})
	if err == nil {
		// Listening makes the holder show in `ss -xlp`; nothing is
		// ever accepted.
		err = unix.Listen(fd, 0)
	}
	switch {
	case errors.Is(err, unix.EADDRINUSE):
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w (@%s): %w", addr, ErrClaimed, name, ErrAddrInUse)
	case err != nil:
		unix.Close(fd)
		return nil, fmt.Errorf("httploop: claim @%s for %s: %w", name, addr, err)
	}
	return &Claim{fd: fd, name: name}, nil
}

// Name is the abstract socket name held.
func (c *Claim) Name() string { return c.name }

// Release gives the claim up. Only a process that stops serving the port
// for good should call it (the process's exit releases it anyway). Safe
// on a nil Claim and to call twice.
func (c *Claim) Release() {
	if c == nil || c.fd < 0 {
		return
	}
	unix.Close(c.fd)
	c.fd = -1
}
