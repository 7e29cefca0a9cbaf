package loadtest

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAnswer(t *testing.T) {
	cases := []struct {
		name, in  string
		n, status int
		body      string
		close     bool
		err       error
	}{
		{"ok", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 40, 200, "{}", false, nil},
		{"two in a row: the first", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 429 X\r\n", 40, 200, "{}", false, nil},
		{"header case, spaces", "HTTP/1.1 429 Too Many\r\ncontent-length:  3 \r\nCONNECTION: Close\r\n\r\nabc", 68, 429, "abc", true, nil},
		{"no reason phrase", "HTTP/1.0 204 \r\n\r\n", 17, 204, "", false, nil},
		{"head incomplete", "HTTP/1.1 200 OK\r\nContent-Len", 0, 0, "", false, errIncomplete},
		{"body incomplete", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 0, 0, "", false, errIncomplete},
		{"no length", "HTTP/1.1 200 OK\r\n\r\n", 0, 0, "", false, errBadResponse},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0, 0, "", false, errBadResponse},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 0, 0, "", false, errBadResponse},
		{"bad status", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", 0, 0, "", false, errBadResponse},
		{"not http", "SMTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0, 0, "", false, errBadResponse},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, 0, "", false, errBadResponse},
		{"header without colon", "HTTP/1.1 200 OK\r\nbogus\r\n\r\n", 0, 0, "", false, errBadResponse},
		{"body too big", "HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n", 0, 0, "", false, errBodyTooBig},
		{"endless head", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeadSize), 0, 0, "", false, errBadResponse},
	}
	for _, c := range cases {
		var a answer
		n, err := parseAnswer([]byte(c.in), &a)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if n != c.n || a.status != c.status || string(a.body) != c.body || a.close != c.close {
			t.Errorf("%s: got n=%d status=%d body=%q close=%v, want %d %d %q %v",
				c.name, n, a.status, a.body, a.close, c.n, c.status, c.body, c.close)
		}
	}
}
