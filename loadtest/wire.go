package loadtest

import (
	"bytes"
	"errors"
)

// answer is one HTTP/1.1 response as the epoll engine reads it: what
// recvState.handle needs and nothing more.
type answer struct {
	status int
	body   []byte // aliases the connection's read buffer until the next read
	close  bool   // the server said "Connection: close"
}

var (
	errIncomplete  = errors.New("incomplete response")
	errBadResponse = errors.New("malformed response")
	errBodyTooBig  = errors.New("response body too large")
)

// maxHeadSize bounds a response head; a server sending more is broken.
const maxHeadSize = 16 << 10

// parseAnswer parses the response at the start of b into a. It returns the
// response's length, errIncomplete when b does not yet hold all of it, or
// another error for a response the generator cannot use. It reads what the
// servers under test send — a status line, headers, a Content-Length body —
// and refuses chunked bodies and bodies delimited by the connection's end,
// which neither tollgated nor the baseline sends.
func parseAnswer(b []byte, a *answer) (int, error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) > maxHeadSize {
			return 0, errBadResponse
		}
		return 0, errIncomplete
	}
	head := b[:end+2]
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	// "HTTP/1.1 200 OK": the version, one space, three digits.
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, errBadResponse
	}
	status := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, errBadResponse
		}
		status = status*10 + int(c-'0')
	}
	*a = answer{status: status}
	length := -1
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, errBadResponse
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, ok := parseLength(value)
			if !ok || (length >= 0 && n != length) {
				return 0, errBadResponse
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, errBadResponse
		case bytes.EqualFold(name, []byte("Connection")):
			a.close = bytes.EqualFold(value, []byte("close"))
		}
	}
	if length < 0 {
		// Only answers that cannot have a body may omit the length.
		if status >= 200 && status != 204 && status != 304 {
			return 0, errBadResponse
		}
		length = 0
	}
	if length > maxBodySize {
		return 0, errBodyTooBig
	}
	total := end + 4 + length
	if len(b) < total {
		return 0, errIncomplete
	}
	a.body = b[end+4 : total]
	return total, nil
}

// parseLength parses a Content-Length value: decimal digits, at most 9 of
// them (anything longer is beyond maxBodySize anyway).
func parseLength(v []byte) (int, bool) {
	if len(v) == 0 || len(v) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
