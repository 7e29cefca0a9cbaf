package route

import (
	"bytes"
	"unicode/utf8"
)

// Reading the original request.
//
// A gateway forwards a request to a service only when tollgated has priced
// it, so tollgated must price the request the service will serve. Where a
// request-target can be read two ways — a service that drops ";jsessionid"
// parameters, one that takes '\' for '/', one that decodes "%2F" before it
// routes, one that ignores case or trailing dots, a framework that honours
// X-HTTP-Method-Override — a client could be priced for one route and
// served another. tollgated therefore reads the original request in two
// steps:
//
//  1. CheckTarget: the request-target must be origin-form (RFC 9112 §3.2.1):
//     a path of RFC 3986 pchars, '/' and valid percent-escapes (and '\',
//     which URIRules decides about), then an optional query of visible
//     ASCII other than '#' with valid escapes. A raw '#', a space, a control
//     byte or a byte above 0x7e is refused whatever the policy says: one
//     gateway cuts the target at '#', the next forwards it whole.
//  2. URIRules.Normalise: every form a service may read differently is
//     refused unless the account's policy says how its service reads it;
//     the rest is brought to one normalised form, which route patterns
//     match.
//
// The normalised form: escapes decoded (each once), segments separated by
// '/', "." and ".." segments resolved (".." above the root stays at the
// root), empty segments dropped, no trailing slash (the root is "/"), valid
// UTF-8 without control bytes; with CaseInsensitive, ASCII letters folded
// to lower case.

// Fault is why an original request cannot be priced as sent.
type Fault uint8

// Faults, each a form a gateway or service may read differently from
// tollgated (every one but FaultSyntax may be allowed by URIRules).
const (
	FaultNone Fault = iota
	// FaultSyntax: not an origin-form request-target of visible ASCII with
	// valid escapes, or a path that decodes to invalid UTF-8 or a control
	// byte.
	FaultSyntax
	// FaultParams: a ';' in a path segment (matrix or ";jsessionid"
	// parameters, "..;").
	FaultParams
	// FaultBackslash: a '\' in the path.
	FaultBackslash
	// FaultEncoded: an escaped separator or escape in the path: %2F, %5C,
	// %2E, %3B, %3F, %23 or %25 (double encoding).
	FaultEncoded
	// FaultTrailingDot: a path segment ending in '.' or ' ' (other than
	// "." and "..").
	FaultTrailingDot
	// FaultMethodCase: a method with a lower-case letter.
	FaultMethodCase
	// FaultMethodOverride: an X-HTTP-Method-Override, X-HTTP-Method or
	// X-Method-Override header, or a _method query parameter.
	FaultMethodOverride
)

var faultDetails = [...]string{
	FaultNone:           "",
	FaultSyntax:         "not an origin-form request-target of visible ASCII with valid percent-escapes, or a path that decodes to invalid UTF-8 or a control byte",
	FaultParams:         "a ';' in a path segment (routes.uri.path_params)",
	FaultBackslash:      "a backslash in the path (routes.uri.backslash)",
	FaultEncoded:        "an escaped separator in the path: %2F, %5C, %2E, %3B, %3F, %23 or %25 (routes.uri.encoded_separators)",
	FaultTrailingDot:    "a path segment ending in a dot or a space (routes.uri.trailing_dot)",
	FaultMethodCase:     "a method with a lower-case letter (routes.uri.case_insensitive)",
	FaultMethodOverride: "a method-override header or _method query parameter (routes.uri.method_override)",
}

// Detail says what a fault is, naming the policy field that allows it. It
// holds no quote, backslash or control byte, so it goes into JSON as it is.
func (f Fault) Detail() string { return faultDetails[f] }

// Treatment is how a route table reads one ambiguous form. Each form
// allows Refuse and the treatments its field's documentation lists.
type Treatment uint8

const (
	// Refuse answers 400: the form is not priced (the default).
	Refuse Treatment = iota
	// Strip removes the form: a segment's ';' and all after it (Tomcat,
	// Jetty, Spring), or a segment's trailing dots and spaces (IIS).
	Strip
	// Keep reads ';' as an ordinary character of its segment (Go, nginx,
	// Node).
	Keep
	// AsSlash reads '\' as a '/' (IIS).
	AsSlash
	// Decode decodes an escaped separator once, then reads it as if sent
	// raw: "%2F" separates segments, "%2E%2E" is a ".." segment.
	Decode
	// Ignore prices the request by its own method: the service does not
	// honour method overrides (or the gateway removes them before it).
	Ignore
)

// URIRules say how a table reads original requests. The zero value refuses
// every ambiguous form and matches case-sensitively.
type URIRules struct {
	PathParams        Treatment // Refuse, Strip or Keep
	Backslash         Treatment // Refuse or AsSlash
	EncodedSeparators Treatment // Refuse or Decode
	TrailingDot       Treatment // Refuse or Strip
	MethodOverride    Treatment // Refuse or Ignore
	// CaseInsensitive folds the path's ASCII letters to lower case and
	// the method's to upper case before matching, for services that
	// ignore case (IIS); patterns are folded when compiled.
	CaseInsensitive bool
}

// MethodOverrideHeaders are the request headers frameworks read a method
// override from.
var MethodOverrideHeaders = [...]string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// CheckTarget splits an original request-target into its path and query
// (without the '?'), or reports FaultSyntax.
func CheckTarget(target []byte) (path, query []byte, f Fault) {
	if len(target) == 0 || target[0] != '/' {
		return nil, nil, FaultSyntax
	}
	path = target
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		path, query = target[:i], target[i+1:]
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '%':
			if !escapeAt(path, i) {
				return nil, nil, FaultSyntax
			}
			i += 2
		case !pathChar[c]:
			return nil, nil, FaultSyntax
		}
	}
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '%':
			if !escapeAt(query, i) {
				return nil, nil, FaultSyntax
			}
			i += 2
		case c < 0x21 || c > 0x7e || c == '#':
			return nil, nil, FaultSyntax
		}
	}
	return path, query, FaultNone
}

// pathChar holds the bytes a path may carry raw: RFC 3986 pchar
// (unreserved, sub-delims, ':' and '@') and '/', plus '\', which no URI
// holds but some clients send (URIRules.Backslash decides).
var pathChar = func() (t [256]bool) {
	for _, c := range []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@/\\") {
		t[c] = true
	}
	return t
}()

func escapeAt(b []byte, i int) bool {
	return i+2 < len(b) && unhex(b[i+1]) >= 0 && unhex(b[i+2]) >= 0
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// encodedSeparator reports whether an escape decodes to a byte a service
// may read as structure rather than data.
func encodedSeparator(c byte) bool {
	switch c {
	case '/', '\\', '.', ';', '?', '#', '%':
		return true
	}
	return false
}

// Normalise reads path (as CheckTarget returned it) under u and appends its
// normalised form to out; dec is scratch for the decoded path. Both are
// returned for reuse. It allocates nothing once out and dec have room for
// len(path) bytes (plus one).
func (u *URIRules) Normalise(out, dec, path []byte) (norm, scratch []byte, f Fault) {
	dec = dec[:0]
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' {
			if !escapeAt(path, i) {
				return out, dec, FaultSyntax
			}
			c = byte(unhex(path[i+1])<<4 | unhex(path[i+2]))
			i += 2
			if encodedSeparator(c) && u.EncodedSeparators != Decode {
				return out, dec, FaultEncoded
			}
		}
		if c < 0x20 || c == 0x7f {
			return out, dec, FaultSyntax
		}
		if c == '\\' {
			if u.Backslash != AsSlash {
				return out, dec, FaultBackslash
			}
			c = '/'
		}
		dec = append(dec, c)
	}
	if !utf8.Valid(dec) {
		return out, dec, FaultSyntax
	}
	start := len(out)
	out = append(out, '/')
	for rest := dec; len(rest) > 0; {
		n := bytes.IndexByte(rest, '/')
		if n < 0 {
			n = len(rest)
		}
		seg := rest[:n]
		rest = rest[n:]
		if len(rest) > 0 {
			rest = rest[1:]
		}
		var fault Fault
		if seg, fault = u.segment(seg); fault != FaultNone {
			return out[:start], dec, fault
		}
		switch {
		case len(seg) == 0 || len(seg) == 1 && seg[0] == '.':
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			if len(out) > start+1 {
				out = out[:start+bytes.LastIndexByte(out[start:len(out)-1], '/')+1]
			}
		default:
			from := len(out)
			out = append(append(out, seg...), '/')
			if u.CaseInsensitive {
				lowerASCII(out[from:])
			}
		}
	}
	if len(out) > start+1 {
		out = out[:len(out)-1] // no trailing slash but the root's
	}
	return out, dec, FaultNone
}

// segment applies the parameter and trailing-dot rules to one decoded
// segment, returning what is left of it.
func (u *URIRules) segment(seg []byte) ([]byte, Fault) {
	if i := bytes.IndexByte(seg, ';'); i >= 0 {
		switch u.PathParams {
		case Strip:
			seg = seg[:i]
		case Keep:
		default:
			return nil, FaultParams
		}
	}
	if isDotSegment(seg) || len(seg) == 0 {
		return seg, FaultNone
	}
	if c := seg[len(seg)-1]; c != '.' && c != ' ' {
		return seg, FaultNone
	}
	if u.TrailingDot != Strip {
		return nil, FaultTrailingDot
	}
	// As Windows reads a name: trailing spaces go, then a "." or ".."
	// left is a dot segment, else trailing dots (and spaces) go too.
	seg = bytes.TrimRight(seg, " ")
	if isDotSegment(seg) {
		return seg, FaultNone
	}
	return bytes.TrimRight(seg, ". "), FaultNone
}

func isDotSegment(s []byte) bool {
	return len(s) == 1 && s[0] == '.' || len(s) == 2 && s[0] == '.' && s[1] == '.'
}

func lowerASCII(b []byte) {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
}

// Method reads an original method (an HTTP token) under u: one with a
// lower-case letter is upper-cased into dst when u is case-insensitive and
// refused otherwise (methods are case-sensitive, but some services and
// gateways upper-case them). It returns the method to match.
func (u *URIRules) Method(dst, m []byte) ([]byte, Fault) {
	lower := false
	for _, c := range m {
		if c >= 'a' && c <= 'z' {
			lower = true
			break
		}
	}
	if !lower {
		return m, FaultNone
	}
	if !u.CaseInsensitive {
		return m, FaultMethodCase
	}
	dst = append(dst[:0], m...)
	for i, c := range dst {
		if c >= 'a' && c <= 'z' {
			dst[i] = c - ('a' - 'A')
		}
	}
	return dst, FaultNone
}

// QueryOverridesMethod reports whether query (as CheckTarget returned it)
// has a parameter named _method (in any case, escaped or not): Spring,
// Laravel and Rack middleware take it for the method. Parameters are split
// at '&' and ';', as some frameworks do.
func QueryOverridesMethod(query []byte) bool {
	const name = "_method"
	for len(query) > 0 {
		end := bytes.IndexAny(query, "&;")
		if end < 0 {
			end = len(query)
		}
		param := query[:end]
		query = query[min(end+1, len(query)):]
		if eq := bytes.IndexByte(param, '='); eq >= 0 {
			param = param[:eq]
		}
		n := 0
		for i := 0; i < len(param) && n <= len(name); i++ {
			c := param[i]
			switch {
			case c == '%' && i+2 < len(param):
				c = byte(unhex(param[i+1])<<4 | unhex(param[i+2]))
				i += 2
			case c == '+':
				c = ' '
			}
			if n == len(name) || lowerByte(c) != name[n] {
				n = len(name) + 1
				break
			}
			n++
		}
		if n == len(name) {
			return true
		}
	}
	return false
}

func lowerByte(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}
