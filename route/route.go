// Package route is an account's compiled forward-auth route table: how a
// request that a gateway (nginx, Caddy, Traefik, Envoy) asks tollgated about
// becomes a workload. Rules pair an HTTP method and a path pattern with an
// operation class and a count; the first rule that matches wins, and a
// table's default (or a refusal, when it has none) answers the rest.
//
// The policy package compiles tables from the policy document and attaches
// them to the account's snapshot; the shard matches the original request
// against them on every forward-auth call, so Match allocates nothing and
// touches only the table and the path it is given.
package route

import (
	"errors"
	"strings"

	"github.com/tollgated/tollgated/core"
)

// Limits on a table, so matching stays a short linear scan of small rules.
const (
	// MaxRules bounds the rules of one table.
	MaxRules = 256
	// MaxPatternLen bounds a path pattern, in bytes.
	MaxPatternLen = 512
	// MaxSegments bounds the segments of a path pattern.
	MaxSegments = 32
	// MaxMethodLen bounds a method name (the longest registered is 17).
	MaxMethodLen = 24
	// MaxHeaderNameLen bounds the name of a count header.
	MaxHeaderNameLen = 64
)

// Table is an account's rules, in order. Default answers requests no rule
// matches; nil means they are refused. URI says how the original request
// is read before it is matched (uri.go).
type Table struct {
	Rules   []Rule
	Default *Rule
	URI     URIRules
}

// Rule is one compiled rule. A rule that does not deny turns the request
// into one work line: Count items of operation class Op, or as many as the
// request header CountHeader says when the gateway sets it.
type Rule struct {
	// Method is the method the rule applies to; "" applies to every method.
	Method  string
	Pattern Pattern
	// Deny refuses matching requests whatever they would cost.
	Deny        bool
	Op          core.OpIndex
	Count       uint64
	CountHeader string
	// Capture admits and commits a reservation for the quote instead of
	// billing it at once: the service behind the gateway finishes it with
	// the units it used (authorize here, capture later).
	Capture bool
	// TTL is how long (ns) a captured reservation may wait for its finish
	// before it lapses; 0 means the policy's hold timeout.
	TTL int64
	// Release makes a capture that lapses bill nothing instead of its
	// quote (core.CaptureRelease).
	Release bool
}

// Match returns the rule for a request with this method and normalised
// path (URIRules.Method, URIRules.Normalise): the first rule that matches,
// else the default, else nil.
func (t *Table) Match(method, path []byte) *Rule {
	for i := range t.Rules {
		r := &t.Rules[i]
		if (r.Method == "" || r.Method == string(method)) && r.Pattern.Match(path) {
			return r
		}
	}
	return t.Default
}

// Of returns the route table attached to snap, or nil when its policy has
// none.
func Of(snap *core.Snapshot) *Table {
	t, _ := snap.Routes.(*Table)
	return t
}

// Pattern is a compiled path pattern: literal segments, "*" for exactly one
// non-empty segment, and a final "**" for any rest of the path (none
// included), so "/v1/files/**" matches "/v1/files" and "/v1/files/a/b".
type Pattern struct {
	segs []segment
	rest bool
	src  string
}

type segment struct {
	lit string
	any bool
}

// String is the pattern as written.
func (p Pattern) String() string { return p.src }

// ErrPattern wraps every reason ParsePattern refuses a pattern.
var ErrPattern = errors.New("route: invalid path pattern")

// ParsePattern compiles a path pattern. It starts with '/', is at most
// MaxPatternLen bytes of visible ASCII, has at most MaxSegments segments,
// and uses '*' only as a whole segment ("*") or as the whole last segment
// ("**"). '?' and '#' have no place in a path and are refused. A trailing
// slash is ignored, as it is in the normalised paths patterns match.
func ParsePattern(s string) (Pattern, error) {
	switch {
	case len(s) == 0 || s[0] != '/':
		return Pattern{}, patternErr("must start with '/'")
	case len(s) > MaxPatternLen:
		return Pattern{}, patternErr("longer than 512 bytes")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '?' || c == '#' {
			return Pattern{}, patternErr("only visible ASCII, and no '?' or '#'")
		}
	}
	parts := strings.Split(strings.TrimSuffix(s[1:], "/"), "/")
	if len(s) == 1 {
		parts = nil // "/": the root, no segment
	}
	if len(parts) > MaxSegments {
		return Pattern{}, patternErr("more than 32 segments")
	}
	p := Pattern{src: s}
	for i, part := range parts {
		switch {
		case part == "**" && i == len(parts)-1:
			p.rest = true
		case part == "*":
			p.segs = append(p.segs, segment{any: true})
		case strings.Contains(part, "*"):
			return Pattern{}, patternErr("'*' is a whole segment, and '**' only the last one")
		default:
			p.segs = append(p.segs, segment{lit: part})
		}
	}
	return p, nil
}

func patternErr(problem string) error { return errors.Join(ErrPattern, errors.New(problem)) }

// FoldCase lower-cases the pattern's literal segments, for a table that
// matches case-insensitively (URIRules.CaseInsensitive).
func (p *Pattern) FoldCase() {
	for i := range p.segs {
		p.segs[i].lit = strings.ToLower(p.segs[i].lit)
	}
}

// Match reports whether path matches. path is normalised (URIRules.
// Normalise: no "." or ".." segments, no empty segments, no trailing
// slash) and starts with '/'; matching is byte for byte.
func (p *Pattern) Match(path []byte) bool {
	rest := path
	for i := range p.segs {
		if len(rest) == 0 || rest[0] != '/' {
			return false
		}
		rest = rest[1:]
		n := 0
		for n < len(rest) && rest[n] != '/' {
			n++
		}
		s := &p.segs[i]
		if s.any && n == 0 || !s.any && string(rest[:n]) != s.lit {
			return false
		}
		rest = rest[n:]
	}
	if len(p.segs) == 0 && !p.rest {
		return len(path) == 1 && path[0] == '/' // "/": the root only
	}
	return p.rest || len(rest) == 0
}

// ValidMethod reports whether m is a method a rule may name: an HTTP token
// of uppercase letters (GET, POST, …), at most MaxMethodLen bytes.
func ValidMethod(m string) bool {
	if len(m) == 0 || len(m) > MaxMethodLen {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// ValidHeaderName reports whether h can name a request header: an HTTP
// token (RFC 9110 §5.1) of at most MaxHeaderNameLen bytes.
func ValidHeaderName(h string) bool {
	if len(h) == 0 || len(h) > MaxHeaderNameLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !IsTokenChar(h[i]) {
			return false
		}
	}
	return true
}

// IsTokenChar reports whether c may appear in an HTTP token (tchar).
func IsTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
