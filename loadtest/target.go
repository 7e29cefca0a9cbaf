package loadtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Target is a validated HTTP endpoint to send load to.
type Target struct {
	// URL is the target as given, for reports.
	URL string
	// Host is the value of the Host header (host[:port] as given).
	Host string
	// Addr is the address dialed: always an IP literal and a port, so that
	// no name is resolved after the loopback check.
	Addr string
	// Base is the path prefix that endpoint paths are appended to, without a
	// trailing slash ("" for the root).
	Base string
}

// ErrRemoteTarget is returned for a target that is not on loopback when
// remote targets are not allowed.
var ErrRemoteTarget = errors.New("target is not a loopback address (127.0.0.0/8, localhost or ::1)")

// CheckTarget parses raw (an http:// URL) and refuses any host that is not
// loopback unless allowRemote is set. Host names other than "localhost" are
// refused without being resolved: resolving them would already be traffic,
// and their addresses could change between the check and the dial.
func CheckTarget(raw string, allowRemote bool) (*Target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", raw, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("target %q: only http:// is supported", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("target %q: user info, query and fragment are not supported", raw)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("target %q: missing host", raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	var ip net.IP
	if strings.EqualFold(host, "localhost") {
		// Dial the IPv4 loopback rather than whatever /etc/hosts says.
		ip = net.IPv4(127, 0, 0, 1)
	} else {
		ip = net.ParseIP(host)
	}
	switch {
	case ip != nil && ip.IsLoopback():
	case allowRemote && ip != nil:
	case allowRemote:
		// A remote host name: resolving it is the caller's explicit choice.
		addrs, err := net.LookupIP(host)
		if err != nil || len(addrs) == 0 {
			return nil, fmt.Errorf("target %q: cannot resolve %s: %v", raw, host, err)
		}
		ip = addrs[0]
	default:
		return nil, fmt.Errorf("target %q: %w; pass --allow-remote to override", raw, ErrRemoteTarget)
	}
	return &Target{
		URL:  raw,
		Host: u.Host,
		Addr: net.JoinHostPort(ip.String(), port),
		Base: strings.TrimSuffix(u.EscapedPath(), "/"),
	}, nil
}
