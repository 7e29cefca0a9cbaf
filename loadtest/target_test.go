package loadtest

import (
	"errors"
	"testing"
)

func TestCheckTargetAcceptsLoopback(t *testing.T) {
	cases := []struct {
		raw, addr, host, base string
	}{
		{"http://127.0.0.1:8080", "127.0.0.1:8080", "127.0.0.1:8080", ""},
		{"http://127.3.4.5:9/", "127.3.4.5:9", "127.3.4.5:9", ""},
		{"http://localhost:8080/api/", "127.0.0.1:8080", "localhost:8080", "/api"},
		{"http://LOCALHOST", "127.0.0.1:80", "LOCALHOST", ""},
		{"http://[::1]:8080", "[::1]:8080", "[::1]:8080", ""},
	}
	for _, c := range cases {
		tg, err := CheckTarget(c.raw, false)
		if err != nil {
			t.Errorf("%s: %v", c.raw, err)
			continue
		}
		if tg.Addr != c.addr || tg.Host != c.host || tg.Base != c.base {
			t.Errorf("%s: got addr %q host %q base %q, want %q %q %q",
				c.raw, tg.Addr, tg.Host, tg.Base, c.addr, c.host, c.base)
		}
	}
}

func TestCheckTargetRefusesRemote(t *testing.T) {
	// None of these may be dialed or resolved: the check must refuse them
	// from the text alone.
	for _, raw := range []string{
		"http://10.0.0.1:8080",
		"http://192.168.1.1",
		"http://8.8.8.8:80",
		"http://example.com:8080",
		"http://localhost.example.com",
		"http://[::2]:80",
		"http://0.0.0.0:8080",
		"http://[::]:8080",
	} {
		_, err := CheckTarget(raw, false)
		if !errors.Is(err, ErrRemoteTarget) {
			t.Errorf("%s: got %v, want ErrRemoteTarget", raw, err)
		}
	}
}

func TestCheckTargetRejectsMalformed(t *testing.T) {
	for _, raw := range []string{
		"https://127.0.0.1:8443",
		"127.0.0.1:8080",
		"http://",
		"http://127.0.0.1:8080/?x=1",
		"http://u:p@127.0.0.1:8080",
	} {
		if _, err := CheckTarget(raw, false); err == nil {
			t.Errorf("%s: accepted", raw)
		}
	}
}

func TestCheckTargetAllowRemoteIPLiteral(t *testing.T) {
	// An IP literal needs no resolution, so this stays offline.
	tg, err := CheckTarget("http://10.1.2.3:8080", true)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Addr != "10.1.2.3:8080" {
		t.Fatalf("addr %q", tg.Addr)
	}
}
