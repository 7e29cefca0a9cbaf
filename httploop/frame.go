//go:build linux

package httploop

import (
	"bytes"
	"encoding/binary"
)

// verdict is what the framer concluded about the request at the front of a
// connection's input.
type verdict uint8

const (
	needMore       verdict = iota // the head is not complete yet
	complete                      // the head is complete; framer.head and framer.body give the extent
	badRequest                    // broken framing: 400, then close
	headerTooLarge                // the head does not end within MaxHeaderBytes: 431
	bodyTooLarge                  // Content-Length above MaxBodyBytes: 413
	lengthRequired                // Transfer-Encoding without Content-Length: 411
)

// maxMethod bounds a method name. The longest registered method is 17 bytes;
// anything longer before the first space is garbage, not a request.
const maxMethod = 24

// framer finds where the request at the front of a buffer ends, before
// fasthttp parses it. It reads only what framing needs: the request line,
// Content-Length, Transfer-Encoding and Expect. Everything else is left to
// fasthttp, which sees the head only once it is complete.
//
// It is resumable: scan is called again each time more bytes arrive, with the
// same request's bytes from its first byte (the buffer only grows between
// calls), and it searches only what it has not searched before. A client that
// trickles a head one byte at a time therefore costs O(head) in total, not
// O(head²).
type framer struct {
	next    int  // offset where the search for a line end resumes
	line    int  // offset where the current line begins
	lineEnd int  // offset of the request line's LF; 0 until the line is complete
	http11  bool // request line says HTTP/1.1 (else HTTP/1.0)
	head    int  // length of the head including its blank line; 0 until found
	body    int  // Content-Length; 0 when absent
	expect  bool // HTTP/1.1 request carrying Expect: 100-continue

	// Framing fields seen so far. Each field line is checked once, when
	// its line end arrives.
	haveLength bool
	tooLong    bool // a Content-Length too large for an int
	chunked    bool // any Transfer-Encoding
}

// scan examines b, the buffered bytes of one request from its first byte, and
// reports needMore until the head is complete. Once it has reported complete
// it keeps doing so without looking at b again.
func (f *framer) scan(b []byte, maxHeader, maxBody int) verdict {
	if f.head > 0 {
		return complete
	}
	// The head must end within maxHeader bytes, so nothing past that is
	// searched; not finding the end there is decided below.
	limit := min(len(b), maxHeader)
	for f.next < limit {
		i := bytes.IndexByte(b[f.next:limit], '\n')
		if i < 0 {
			f.next = limit
			break
		}
		i += f.next
		// Lines end in CRLF. A bare LF is refused rather than tolerated:
		// accepting a framing that other parsers reject is how requests
		// get smuggled past a proxy in front of us.
		if i == 0 || b[i-1] != '\r' {
			return badRequest
		}
		line := b[f.line : i-1]
		f.next, f.line = i+1, i+1
		switch {
		case f.lineEnd == 0:
			http11, ok := requestLine(line)
			if !ok {
				return badRequest
			}
			f.lineEnd, f.http11 = i, http11
		case len(line) == 0:
			f.head = i + 1
			return f.finish(maxBody)
		case !f.field(line):
			return badRequest
		}
	}
	if len(b) >= maxHeader {
		return headerTooLarge
	}
	if f.lineEnd == 0 && !methodPrefix(b) {
		// Answer garbage as soon as it is recognisable instead of waiting
		// for a line end that may never come.
		return badRequest
	}
	return needMore
}

// field checks one header field line (without its CRLF) and records the
// framing ones. It reports false for a malformed line.
func (f *framer) field(line []byte) bool {
	// The name is a token directly followed by the colon: a leading space
	// (obsolete line folding) or whitespace before the colon (RFC 9112
	// §5.1) fails here.
	colon := 0
	for colon < len(line) && tokenChar[line[colon]] {
		colon++
	}
	if colon == 0 || colon == len(line) || line[colon] != ':' {
		return false
	}
	name, value := line[:colon], trimSpace(line[colon+1:])
	if !isFieldValue(value) {
		return false
	}
	switch {
	case equalFold(name, "content-length"):
		n, ok, over := parseLength(value)
		if !ok {
			return false
		}
		// Repeated Content-Length fields must agree (RFC 9110 §8.6).
		if f.haveLength && (over != f.tooLong || n != f.body) {
			return false
		}
		f.haveLength, f.body, f.tooLong = true, n, over
	case equalFold(name, "transfer-encoding"):
		f.chunked = true
	case equalFold(name, "expect"):
		f.expect = f.http11 && equalFold(value, "100-continue")
	}
	return true
}

// finish decides on a complete head.
func (f *framer) finish(maxBody int) verdict {
	switch {
	case f.chunked && f.haveLength:
		// Both framings at once is the classic smuggling shape
		// (RFC 9112 §6.3): refuse rather than pick one.
		return badRequest
	case f.chunked:
		return lengthRequired
	case f.tooLong || f.body > maxBody:
		return bodyTooLarge
	}
	return complete
}

// requestLine checks method SP request-target SP HTTP-version, the line
// without its CRLF, and reports whether the version is HTTP/1.1. Only
// HTTP/1.0 and HTTP/1.1 are accepted.
func requestLine(b []byte) (http11, ok bool) {
	sp := bytes.IndexByte(b, ' ')
	if sp <= 0 || sp > maxMethod || !isToken(b[:sp]) {
		return false, false
	}
	b = b[sp+1:]
	sp = bytes.IndexByte(b, ' ')
	if sp <= 0 {
		return false, false
	}
	for _, c := range b[:sp] {
		if c <= ' ' || c >= 0x7f {
			return false, false
		}
	}
	switch string(b[sp+1:]) {
	case "HTTP/1.1":
		return true, true
	case "HTTP/1.0":
		return false, true
	}
	return false, false
}

// methodPrefix reports whether b, a request line whose end has not arrived,
// can still begin a valid one: a method of token characters and then a space.
func methodPrefix(b []byte) bool {
	for i, c := range b {
		if c == ' ' {
			return i > 0
		}
		if i >= maxMethod || !tokenChar[c] {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length value: one or more digits, nothing
// else (so no sign, no list). over reports a well-formed value too large for
// an int, which no body limit admits anyway.
func parseLength(b []byte) (n int, ok, over bool) {
	if len(b) == 0 {
		return 0, false, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		if n > (1<<62)/10 {
			over = true
			continue
		}
		n = n*10 + int(c-'0')
	}
	if over {
		n = 0
	}
	return n, true, over
}

// isToken reports whether b is a non-empty token (RFC 9110 §5.6.2).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenChar[c] {
			return false
		}
	}
	return true
}

// isFieldValue reports whether b holds only field-value characters: visible
// ASCII, space, tab and obs-text. Control characters, NUL and a lone CR among
// them are refused (RFC 9110 §5.5).
//
// Eight bytes at a time: a word with no byte below 0x20 and none equal to
// 0x7f needs no closer look, and tabs, the only control allowed, are rare.
func isFieldValue(b []byte) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		// A byte below 0x20 (x-0x20 borrows into its high bit, which x
		// lacks), or a byte equal to 0x7f (zero after the xor).
		y := x ^ 0x7f*ones
		if ((x-0x20*ones)&^x|(y-ones)&^y)&highs != 0 && !fieldBytes(b[:8]) {
			return false
		}
		b = b[8:]
	}
	return fieldBytes(b)
}

func fieldBytes(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// trimSpace removes optional whitespace (spaces and tabs) around a value.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold reports whether b equals lower, which must be lower-case ASCII,
// ignoring ASCII case in b.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// tokenChar marks the token characters of RFC 9110 §5.6.2.
var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
