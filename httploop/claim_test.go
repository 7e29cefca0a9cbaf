//go:build linux

package httploop

import (
	"errors"
	"net"
	"strconv"
	"testing"
)

// TestClaimIsOnePerPortWhateverTheSpelling: every spelling of a port —
// wildcard, loopback, IPv6 — claims the same name, so only the first
// holds it; releasing it lets the next in; port 0 claims nothing.
func TestClaimIsOnePerPortWhateverTheSpelling(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	first, err := ClaimPort("127.0.0.1:" + port)
	if err != nil || first == nil || first.Name() != "tollgated/tcp/"+port {
		t.Fatalf("first claim: %v %v", first, err)
	}
	for _, addr := range []string{"127.0.0.1:" + port, ":" + port, "0.0.0.0:" + port, "[::]:" + port, "[::1]:" + port, "localhost:" + port} {
		c, err := ClaimPort(addr)
		if !errors.Is(err, ErrClaimed) || !errors.Is(err, ErrAddrInUse) || c != nil {
			t.Fatalf("second claim through %s: %v, %v", addr, c, err)
		}
	}
	first.Release()
	first.Release() // twice is harmless
	again, err := ClaimPort(":" + port)
	if err != nil || again == nil {
		t.Fatalf("claim after release: %v", err)
	}
	again.Release()
	if c, err := ClaimPort("127.0.0.1:0"); c != nil || err != nil {
		t.Fatalf("port 0: %v %v", c, err)
	}
	var none *Claim
	none.Release()
}
