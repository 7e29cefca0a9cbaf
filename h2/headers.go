package h2

import (
	"math"

	"github.com/tollgated/tollgated/decimal"
)

// verdict is what a request's headers call for.
type verdict uint8

const (
	verdictOK          verdict = iota
	verdictMalformed           // RST_STREAM PROTOCOL_ERROR (§8.1.1)
	verdictMethod              // 405, not POST
	verdictContentType         // 415, not application/grpc (gRPC spec)
	verdictTimeout             // 400, a malformed grpc-timeout
)

// requestHeaders is what a stream keeps of its request's headers.
type requestHeaders struct {
	method        int32
	timeout       int64
	contentLength int64
}

// checkRequest checks the request header list in c.fields against RFC
// 9113 §8.2-8.3 and the gRPC protocol, filling r.
func (c *Conn) checkRequest(r *requestHeaders) verdict {
	f := c.fields
	var method, scheme, path, authority, ctype, timeout field
	r.contentLength = -1
	regular := false
	for i := range f.Len() {
		name, value := f.Name(i), f.Value(i)
		if !validValue(value) {
			return verdictMalformed
		}
		if len(name) > 0 && name[0] == ':' {
			// Pseudo-headers: the request ones only, once each, before
			// any regular field (§8.3).
			var p *field
			switch string(name) {
			case ":method":
				p = &method
			case ":scheme":
				p = &scheme
			case ":path":
				p = &path
			case ":authority":
				p = &authority
			}
			if regular || p == nil || p.ok {
				return verdictMalformed
			}
			*p = field{value, true}
			continue
		}
		regular = true
		if !validName(name) {
			return verdictMalformed
		}
		switch string(name) {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
			return verdictMalformed // connection-specific (§8.2.2)
		case "te":
			if string(value) != "trailers" {
				return verdictMalformed
			}
		case "content-type":
			ctype = field{value, true}
		case "grpc-timeout":
			timeout = field{value, true}
		case "content-length":
			n, ok := parseDecimal(value)
			if !ok || r.contentLength >= 0 && r.contentLength != n {
				return verdictMalformed
			}
			r.contentLength = n
		}
	}
	switch {
	case !method.ok:
		return verdictMalformed
	case string(method.v) == "CONNECT":
		return verdictMethod // with its own pseudo-header rules (§8.5), served nowhere
	case !scheme.ok || !path.ok || len(path.v) == 0:
		return verdictMalformed
	case string(method.v) != "POST":
		return verdictMethod
	case !ctype.ok || len(ctype.v) < len("application/grpc") ||
		string(ctype.v[:len("application/grpc")]) != "application/grpc":
		return verdictContentType
	}
	r.timeout = 0
	if timeout.ok {
		t, ok := parseTimeout(timeout.v)
		if !ok {
			return verdictTimeout
		}
		r.timeout = t
	}
	r.method = -1
	if m, ok := c.methods[string(path.v)]; ok {
		r.method = m
	}
	return verdictOK
}

// field is a header value found, or not.
type field struct {
	v  []byte
	ok bool
}

// checkTrailers checks a trailer list in c.fields: regular fields only,
// well formed, none connection-specific.
func (c *Conn) checkTrailers() bool {
	f := c.fields
	for i := range f.Len() {
		name, value := f.Name(i), f.Value(i)
		if !validName(name) || !validValue(value) {
			return false
		}
		switch string(name) {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "te":
			return false
		}
	}
	return true
}

// validName reports whether a regular field name is well formed (§8.2.1):
// not empty, no control characters, space, upper case, DEL, non-ASCII or
// colon.
func validName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, b := range name {
		if b <= 0x20 || b >= 0x7f || 'A' <= b && b <= 'Z' || b == ':' {
			return false
		}
	}
	return true
}

// validValue reports whether a field value is well formed (§8.2.1): no
// NUL, CR or LF, and no leading or trailing space or tab.
func validValue(v []byte) bool {
	if n := len(v); n > 0 && (isBlank(v[0]) || isBlank(v[n-1])) {
		return false
	}
	for _, b := range v {
		if b == 0 || b == '\r' || b == '\n' {
			return false
		}
	}
	return true
}

func isBlank(b byte) bool { return b == ' ' || b == '\t' }

// parseDecimal parses a content-length: 1 to 18 digits.
func parseDecimal(v []byte) (int64, bool) {
	n, ok := decimal.Uint(v)
	return int64(n), ok && len(v) <= 18
}

// parseTimeout parses a grpc-timeout (gRPC spec): 1 to 8 digits and a
// unit, H M S m u or n. The result saturates at math.MaxInt64 ns, and a
// zero timeout is reported as 1 ns, since 0 means none: it has expired.
func parseTimeout(v []byte) (int64, bool) {
	if len(v) < 2 || len(v) > maxTimeoutDigits+1 {
		return 0, false
	}
	var unit int64
	switch v[len(v)-1] {
	case 'H':
		unit = 3600e9
	case 'M':
		unit = 60e9
	case 'S':
		unit = 1e9
	case 'm':
		unit = 1e6
	case 'u':
		unit = 1e3
	case 'n':
		unit = 1
	default:
		return 0, false
	}
	d, ok := decimal.Uint(v[:len(v)-1])
	if !ok {
		return 0, false
	}
	n := int64(d) // at most 8 digits
	if n > math.MaxInt64/unit {
		return math.MaxInt64, true
	}
	return max(n*unit, 1), true
}
