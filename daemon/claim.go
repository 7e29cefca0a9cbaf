//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"net"

	"github.com/tollgated/tollgated/httploop"
)

// addressClaims are this daemon's claims on its data-plane and admin ports
// (httploop.Claim), taken first thing at start and held until the daemon
// has stopped: two daemons started at the same instant on one address
// cannot both pass checkAddresses and then both bind with SO_REUSEPORT.
type addressClaims []*httploop.Claim

// claimAddresses claims the ports of the data-plane and the admin address
// (a port of 0 needs none); it fails naming the address when another
// process holds either.
func claimAddresses(cfg Config) (addressClaims, error) {
	var claims addressClaims
	for _, a := range []struct{ what, flag, addr string }{
		{"data-plane", "--listen", cfg.Listen},
		{"admin", "--admin", cfg.Admin},
	} {
		c, err := httploop.ClaimPort(a.addr)
		if err != nil {
			claims.release()
			if errors.Is(err, httploop.ErrClaimed) {
				if a.flag == "--admin" && samePort(cfg.Listen, cfg.Admin) {
					return nil, fmt.Errorf("--listen %s and --admin %s use the same port: give each its own", cfg.Listen, cfg.Admin)
				}
				return nil, fmt.Errorf("the %s address %s (%s) is already served by another process (another tollgated holds the claim on its port, @%s): refusing to start",
					a.what, a.addr, a.flag, httploop.ClaimName(portNumber(a.addr)))
			}
			return nil, fmt.Errorf("%s %s: %w", a.flag, a.addr, err)
		}
		if c != nil {
			claims = append(claims, c)
		}
	}
	return claims, nil
}

// samePort reports whether two addresses name the same non-zero port.
func samePort(a, b string) bool {
	p := portNumber(a)
	return p != 0 && p == portNumber(b)
}

// portNumber is addr's port, 0 if it has none or cannot be resolved.
func portNumber(addr string) int {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return 0
	}
	return ta.Port
}

// release gives every claim up.
func (cs addressClaims) release() {
	for _, c := range cs {
		c.Release()
	}
}
