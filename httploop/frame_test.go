//go:build linux

package httploop

import (
	"bytes"
	"strings"
	"testing"
)

const (
	testMaxHeader = 256
	testMaxBody   = 1000
)

func TestFramerVerdicts(t *testing.T) {
	long := strings.Repeat("a", testMaxHeader)
	for _, tc := range []struct {
		name   string
		in     string
		want   verdict
		head   int // when complete
		body   int
		expect bool
	}{
		{"minimal", "GET / HTTP/1.1\r\n\r\n", complete, 18, 0, false},
		{"fields", "GET /x HTTP/1.1\r\nHost: a\r\nX: y\r\n\r\n", complete, 34, 0, false},
		{"length", "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", complete, 38, 5, false},
		{"length case", "POST / HTTP/1.1\r\ncOnTeNt-LeNgTh:\t 7 \r\n\r\n", complete, 40, 7, false},
		{"same length twice", "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", complete, 57, 3, false},
		{"http10", "GET / HTTP/1.0\r\n\r\n", complete, 18, 0, false},
		{"expect", "PUT / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n", complete, 59, 1, true},
		{"expect ignored on 1.0", "PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", complete, 40, 0, false},
		{"partial line", "GET /abc", needMore, 0, 0, false},
		{"partial head", "GET / HTTP/1.1\r\nHost: a\r\n", needMore, 0, 0, false},
		{"partial terminator", "GET / HTTP/1.1\r\nHost: a\r\n\r", needMore, 0, 0, false},
		{"partial method", "DELE", needMore, 0, 0, false},

		{"garbage", "\x16\x03\x01\x02\x00", badRequest, 0, 0, false},
		{"no space in method run", strings.Repeat("A", maxMethod+1), badRequest, 0, 0, false},
		{"empty method", " / HTTP/1.1\r\n\r\n", badRequest, 0, 0, false},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", badRequest, 0, 0, false},
		{"bare LF later", "GET / HTTP/1.1\r\nHost: a\n\r\n", badRequest, 0, 0, false},
		{"bad version", "GET / HTTP/2.0\r\n\r\n", badRequest, 0, 0, false},
		{"no target", "GET HTTP/1.1\r\n\r\n", badRequest, 0, 0, false},
		{"control in target", "GET /\x01 HTTP/1.1\r\n\r\n", badRequest, 0, 0, false},
		{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", badRequest, 0, 0, false},
		{"obs-fold", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", badRequest, 0, 0, false},
		{"no colon", "GET / HTTP/1.1\r\nHost\r\n\r\n", badRequest, 0, 0, false},
		{"NUL in value", "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", badRequest, 0, 0, false},
		{"CR in value", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", badRequest, 0, 0, false},
		{"signed length", "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", badRequest, 0, 0, false},
		{"empty length", "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", badRequest, 0, 0, false},
		{"list length", "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", badRequest, 0, 0, false},
		{"conflicting lengths", "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", badRequest, 0, 0, false},
		{"length and chunked", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", badRequest, 0, 0, false},

		{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", lengthRequired, 0, 0, false},
		{"body too large", "POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", bodyTooLarge, 0, 0, false},
		{"huge length", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n", bodyTooLarge, 0, 0, false},
		{"head too large", "GET /" + long, headerTooLarge, 0, 0, false},
		{"head too large by one", "GET / HTTP/1.1\r\nX: " + strings.Repeat("b", testMaxHeader-18-4) + "\r\n\r\n", headerTooLarge, 0, 0, false},
		{"head exactly max", "GET / HTTP/1.1\r\nX: " + strings.Repeat("b", testMaxHeader-18-5) + "\r\n\r\n", complete, testMaxHeader, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f framer
			got := f.scan([]byte(tc.in), testMaxHeader, testMaxBody)
			if got != tc.want {
				t.Fatalf("scan(%q) = %v, want %v", tc.in, got, tc.want)
			}
			if got == complete && (f.head != tc.head || f.body != tc.body || f.expect != tc.expect) {
				t.Fatalf("scan(%q): head %d body %d expect %v, want %d %d %v",
					tc.in, f.head, f.body, f.expect, tc.head, tc.body, tc.expect)
			}
		})
	}
}

// TestFramerResumes feeds a request one byte at a time, as a slow client
// would, and checks that the framer reaches the same verdict as in one go.
func TestFramerResumes(t *testing.T) {
	in := []byte("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	var f framer
	var v verdict
	for n := 1; n <= len(in); n++ {
		v = f.scan(in[:n], testMaxHeader, testMaxBody)
		if v == complete {
			break
		}
		if v != needMore {
			t.Fatalf("after %d bytes: %v", n, v)
		}
	}
	if v != complete || f.head != len(in)-2 || f.body != 2 {
		t.Fatalf("verdict %v head %d body %d", v, f.head, f.body)
	}
}

// scanChunked feeds b to a framer in pieces of the given sizes (cycled) and
// returns the verdict and the framer.
func scanChunked(b []byte, sizes []byte) (verdict, framer) {
	var f framer
	n := 0
	for i := 0; ; i++ {
		step := 1
		if len(sizes) > 0 {
			step = int(sizes[i%len(sizes)])%32 + 1
		}
		n = min(n+step, len(b))
		if v := f.scan(b[:n], testMaxHeader, testMaxBody); v != needMore || n == len(b) {
			return v, f
		}
	}
}

// FuzzFramer checks that the framer never panics, that what it calls a head
// ends with CRLF CRLF within the limit, and that its verdict does not depend
// on how the bytes were split into reads. Seeds live in testdata/fuzz.
func FuzzFramer(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), []byte{3})
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"), []byte{0, 7})
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), []byte{1})
	f.Fuzz(func(t *testing.T, b, sizes []byte) {
		var whole framer
		v := whole.scan(b, testMaxHeader, testMaxBody)
		if v == complete {
			if whole.head > testMaxHeader || whole.head > len(b) || !bytes.HasSuffix(b[:whole.head], []byte("\r\n\r\n")) {
				t.Fatalf("head %d of %q", whole.head, b)
			}
			if whole.body < 0 || whole.body > testMaxBody {
				t.Fatalf("body %d", whole.body)
			}
		}
		pv, pf := scanChunked(b, sizes)
		if v == complete || pv == complete {
			if pv != v || pf.head != whole.head || pf.body != whole.body || pf.expect != whole.expect {
				t.Fatalf("split %v %+v, whole %v %+v", pv, pf, v, whole)
			}
			return
		}
		// Before completion a prefix may look fine and the whole not (or
		// the reverse for the method prefix check), but a definite refusal
		// must not turn into acceptance.
		if v != needMore && pv == needMore && len(b) > 0 && v != headerTooLarge {
			t.Fatalf("split says needMore, whole says %v for %q", v, b)
		}
	})
}

// TestFieldValueWords checks the eight-bytes-at-a-time field value check
// against the plain one, around every byte value and position.
func TestFieldValueWords(t *testing.T) {
	base := []byte("abcdefghijklmnopqrstuvw")
	for c := range 256 {
		for pos := range base {
			b := append([]byte(nil), base...)
			b[pos] = byte(c)
			if got, want := isFieldValue(b), fieldBytes(b); got != want {
				t.Fatalf("byte %#x at %d: %v, want %v", c, pos, got, want)
			}
		}
	}
}
