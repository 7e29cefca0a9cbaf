//go:build linux

package httploop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/valyala/fasthttp"
)

func TestConnectionClose(t *testing.T) {
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	write(t, c, "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"+get("/never"))
	resp, body := readResponse(t, c, br, "GET")
	if body != "/a" || !resp.Close {
		t.Fatalf("body %q, close %v", body, resp.Close)
	}
	expectEOF(t, c, br)
	c.Close()
	await.True(t, "close counted", func() bool { return s.Stats().Closed[CloseRequested] == 1 })
	if n := s.Stats().Requests; n != 1 {
		t.Fatalf("%d requests served after Connection: close", n)
	}
}

func TestHandlerClosesConnection(t *testing.T) {
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	write(t, c, get("/close"))
	if resp, _ := readResponse(t, c, br, "GET"); !resp.Close {
		t.Fatal("no Connection: close")
	}
	expectEOF(t, c, br)
}

func TestHTTP10(t *testing.T) {
	s := start(t, testHandler, Config{})

	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	write(t, c, "GET /old HTTP/1.0\r\n\r\n")
	if _, body := readResponse(t, c, br, "GET"); body != "/old" {
		t.Fatalf("body %q", body)
	}
	expectEOF(t, c, br)

	c = dial(t, s.addr)
	br = bufio.NewReader(c)
	for i := range 3 {
		write(t, c, "GET /ka HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		resp, body := readResponse(t, c, br, "GET")
		if body != "/ka" || resp.Close || !strings.EqualFold(resp.Header.Get("Connection"), "keep-alive") {
			t.Fatalf("request %d: body %q, close %v, Connection %q", i, body, resp.Close, resp.Header.Get("Connection"))
		}
	}
}

func TestHeadHasNoBody(t *testing.T) {
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	write(t, c, "HEAD /abcd HTTP/1.1\r\nHost: x\r\n\r\n"+get("/next"))
	resp, body := readResponse(t, c, br, "HEAD")
	if resp.ContentLength != 5 || body != "" {
		t.Fatalf("HEAD: length %d body %q", resp.ContentLength, body)
	}
	// Had the body been sent, this would read it as a status line.
	if _, body := readResponse(t, c, br, "GET"); body != "/next" {
		t.Fatalf("after HEAD: %q", body)
	}
}

func TestExpectContinue(t *testing.T) {
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	write(t, c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	resp, _ := readResponse(t, c, br, "POST")
	if resp.StatusCode != 100 {
		t.Fatalf("status %d, want 100", resp.StatusCode)
	}
	write(t, c, "hello")
	if resp, body := readResponse(t, c, br, "POST"); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

func TestLargeBody(t *testing.T) {
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	body := strings.Repeat("xyz", 100_000) // far above the pooled buffer size
	for range 2 {
		write(t, c, fmt.Sprintf("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)+get("/after"))
		if _, got := readResponse(t, c, br, "POST"); got != body {
			t.Fatalf("echoed %d bytes, want %d", len(got), len(body))
		}
		if _, got := readResponse(t, c, br, "GET"); got != "/after" {
			t.Fatalf("after large body: %q", got)
		}
	}
}

func TestEmptyLinesBetweenRequests(t *testing.T) {
	s := start(t, testHandler, Config{})
	c := dial(t, s.addr)
	br := bufio.NewReader(c)
	write(t, c, "\r\n\r\n"+get("/a")+"\r\n"+get("/b"))
	for _, want := range []string{"/a", "/b"} {
		if _, body := readResponse(t, c, br, "GET"); body != want {
			t.Fatalf("%q, want %q", body, want)
		}
	}
}

// problemOf checks a problem+json answer and returns its code.
func problemOf(t testing.TB, resp *http.Response, body string) string {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != contentTypeProblem {
		t.Fatalf("Content-Type %q", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Type != "about:blank" || p.Status != resp.StatusCode || p.Title == "" {
		t.Fatalf("problem %+v for status %d", p, resp.StatusCode)
	}
	return p.Code
}

// TestRefusals sends each kind of unacceptable request and checks the
// answer, that the connection is closed after it, and that the loop goes on
// serving others.
func TestRefusals(t *testing.T) {
	s := start(t, testHandler, Config{MaxBodyBytes: 64 << 10})
	for _, tc := range []struct {
		name   string
		send   string
		status int
		code   string
		why    CloseReason
	}{
		{"garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03garbage", 400, "malformed-request", CloseBadRequest},
		{"garbage line", "HELLO THERE FRIEND\r\n\r\n", 400, "malformed-request", CloseBadRequest},
		{"missing host", "GET / HTTP/1.1\r\n\r\n", 400, "malformed-request", CloseBadRequest},
		{"length and chunked", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "malformed-request", CloseBadRequest},
		{"bad length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n", 400, "malformed-request", CloseBadRequest},
		{"chunked", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411, "length-required", CloseBadRequest},
		{"header too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", 431, "header-too-large", CloseBadRequest},
		{"header never ends", "GET / HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", 2000), 431, "header-too-large", CloseBadRequest},
		{"body too large", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n" + strings.Repeat("z", 200_000), 413, "body-too-large", CloseBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Stats().Closed[tc.why]
			c := dial(t, s.addr)
			br := bufio.NewReader(c)
			go c.Write([]byte(tc.send)) // may block on a large body the server never reads
			resp, body := readResponse(t, c, br, "GET")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			if code := problemOf(t, resp, body); code != tc.code {
				t.Fatalf("code %q, want %q", code, tc.code)
			}
			if !resp.Close {
				t.Fatal("no Connection: close")
			}
			expectEOF(t, c, br)
			c.Close() // the server lingers for this FIN before it closes

			other := dial(t, s.addr)
			write(t, other, get("/still"))
			if _, body := readResponse(t, other, bufio.NewReader(other), "GET"); body != "/still" {
				t.Fatalf("loop no longer serving: %q", body)
			}
			await.True(t, "close counted", func() bool { return s.Stats().Closed[tc.why] > before })
		})
	}
}

// memConn builds a connection that is not a socket, for driving serve on
// bytes in memory.
func memConn(l *Loop) *conn {
	return &conn{fd: -1, open: true, slot: 0, id: 1, out: l.bufs.get()}
}

// memLoop is a loop that is never run; serve is driven directly.
func memLoop(t testing.TB, h Handler, cfg Config) *Loop {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(ln, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.stop)
	return l
}

var jsonBody = []byte(`{"decision":"admit","request_id":"r-1","units":42}`)

func jsonHandler(x *Ctx) {
	x.Response.Header.SetContentType("application/json")
	x.Response.SetBodyRaw(jsonBody)
}

// TestServeAllocs checks that parse → handle → write allocates nothing once
// warm: the loop's own work per request, without sockets.
func TestServeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	l := memLoop(t, jsonHandler, Config{})
	c := memConn(l)
	c.in = make([]byte, 0, 4<<10)
	req := []byte("POST /v1/check HTTP/1.1\r\nHost: tollgated\r\nAuthorization: Bearer k\r\n" +
		"Content-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"units\": 42}" +
		"HEAD /livez HTTP/1.1\r\nHost: tollgated\r\n\r\n" +
		"GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" +
		"PUT /v1/x HTTP/1.1\r\nHost: tollgated\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi")
	run := func() {
		// Half the bytes first, so a head and a body each arrive in two
		// pieces, as from a socket.
		c.in = append(c.in[:0], req[:len(req)/2]...)
		c.r = 0
		l.serve(c)
		c.in = append(c.in, req[len(req)/2:]...)
		l.serve(c)
		c.out, c.w = c.out[:0], 0
	}
	run()
	if allocs := testing.AllocsPerRun(2000, run); allocs != 0 {
		t.Fatalf("%v allocations per four requests", allocs)
	}
	if c.r != len(req) || l.cnt.v[statRequests] != 2002*4 {
		t.Fatalf("consumed %d of %d, %d requests", c.r, len(req), l.cnt.v[statRequests])
	}
}

func TestServeInMemory(t *testing.T) {
	l := memLoop(t, testHandler, Config{})
	l.now = 1
	c := memConn(l)
	c.in = []byte(get("/one") + "HEAD /two HTTP/1.1\r\nHost: x\r\n\r\n" + "GET /thr")
	l.serve(c)
	br := bufio.NewReader(bytes.NewReader(c.out))
	for _, want := range []struct{ method, body string }{{"GET", "/one"}, {"HEAD", ""}} {
		resp, err := http.ReadResponse(br, &http.Request{Method: want.method})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		if b.String() != want.body {
			t.Fatalf("%s: %q", want.method, b.String())
		}
	}
	if br.Buffered() != 0 {
		t.Fatal("trailing output")
	}
	if string(c.in[c.r:]) != "GET /thr" || c.reqStart == 0 {
		t.Fatalf("left %q, reqStart %d", c.in[c.r:], c.reqStart)
	}
}

// FuzzServe feeds arbitrary bytes to a connection and checks that the loop
// never panics and only ever writes whole HTTP/1.1 responses. Seeds live in
// testdata/fuzz.
func FuzzServe(f *testing.F) {
	f.Add([]byte(get("/a") + "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"))
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"))
	f.Add([]byte("GET /%zz?a=%% HTTP/1.1\r\nHost: [::1\r\nCookie: ;;=\r\n\r\n"))
	// Answers to HEAD carry a marker, so the checker knows they have no body.
	h := func(x *Ctx) {
		testHandler(x)
		if x.Request.Header.IsHead() {
			x.Response.Header.Set("X-Head", "1")
		}
	}
	l := memLoop(f, h, Config{MaxHeaderBytes: 512, MaxBodyBytes: 512})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := memConn(l)
		c.in = append([]byte(nil), in...)
		l.serve(c)
		if c.r > len(c.in) {
			t.Fatalf("consumed %d of %d", c.r, len(c.in))
		}
		br := bufio.NewReader(bytes.NewReader(c.out))
		for n := 0; ; n++ {
			if _, err := br.Peek(1); err != nil {
				break
			}
			if b, _ := br.Peek(9); string(b) != "HTTP/1.1 " {
				t.Fatalf("answer %d is not a response: %q", n, c.out)
			}
			var resp fasthttp.Response
			if err := resp.Header.Read(br); err != nil {
				t.Fatalf("answer %d unreadable in %q: %v", n, c.out, err)
			}
			if resp.StatusCode() == 100 || len(resp.Header.Peek("X-Head")) > 0 {
				continue
			}
			if _, err := br.Discard(resp.Header.ContentLength()); err != nil {
				t.Fatalf("answer %d body short in %q", n, c.out)
			}
		}
	})
}
