package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/internal/await"
)

// addr is the harness listener's host:port.
func (h *harness) addr() string { return strings.TrimPrefix(h.url, "http://") }

// raw sends req as bytes on a new connection, half-closing it after when
// halfClose, and reads one answer.
func (h *harness) raw(req string, halfClose bool) (*http.Response, []byte) {
	h.t.Helper()
	c, err := net.DialTimeout("tcp", h.addr(), time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		h.t.Fatal(err)
	}
	if halfClose {
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			h.t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		h.t.Fatalf("%.60q: no answer: %v", req, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%.60q: reading the answer: %v", req, err)
	}
	return resp, b
}

// TestServerOwnRefusalsAreProblems: what net/http refuses before any
// handler runs (it writes plain text) reaches the client as a problem.
func TestServerOwnRefusalsAreProblems(t *testing.T) {
	h := newHarness(t)
	auth := "Authorization: Bearer " + h.token + "\r\n"
	cases := []struct {
		name, req string
		status    int
		code      string
		detail    string
	}{
		{"malformed header", "GET /v1/leases HTTP/1.1\r\nHost: a\r\nNo colon here\r\n\r\n", 400, codeMalformedRequest, ""},
		{"malformed request line", "GARBAGE\r\n\r\n", 400, codeMalformedRequest, ""},
		{"no Host", "GET /v1/leases HTTP/1.1\r\n" + auth + "\r\n", 400, codeMalformedRequest, "missing required Host header"},
		{"two Hosts", "GET /v1/leases HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, codeMalformedRequest, ""},
		{"HTTP/2.5", "GET /v1/leases HTTP/2.5\r\nHost: a\r\n\r\n", 505, codeMalformedRequest, "unsupported protocol version"},
		{"huge headers", "GET /v1/leases HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 64<<10) + "\r\n\r\n", 431, codeHeadersTooLarge, ""},
		// The documented bound: 16 KiB plus net/http's 4 KiB of slack.
		{"headers just over 20 KiB", "GET /v1/leases HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 20<<10) + "\r\n\r\n", 431, codeHeadersTooLarge, ""},
		{"unknown transfer coding", "POST /v1/accounts HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501, codeUnsupportedFraming, ""},
		{"unsupported Expect", "POST /v1/accounts HTTP/1.1\r\nHost: a\r\n" + auth + "Expect: teapot\r\nContent-Length: 2\r\n\r\n{}", 417, codeUnsupportedFraming, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := h.raw(c.req, false)
			p := h.checkProblem(resp.StatusCode, resp.Header, body, c.status, c.code, c.name)
			if c.detail != "" && !strings.Contains(p.Detail, c.detail) {
				t.Fatalf("detail %q, want %q", p.Detail, c.detail)
			}
			if resp.ContentLength != int64(len(body)) || !resp.Close {
				t.Fatalf("length %d for %d bytes, close %v", resp.ContentLength, len(body), resp.Close)
			}
		})
	}
}

// TestUncleanPathsAreNeverRedirected: the mux would answer these with a
// redirect before authentication; they are unmatched instead (401 without
// the token, 404 with it).
func TestUncleanPathsAreNeverRedirected(t *testing.T) {
	h := newHarness(t)
	for _, path := range []string{"/v1/../metrics", "//metrics", "/v1/./accounts", "/v1/accounts/acme/../acme", "/debug/pprof",
		"/v1//accounts", "/metrics/.", "/%2e%2e/metrics", "//", "*"} {
		method := "GET"
		if path == "*" {
			method = "OPTIONS"
		}
		for _, auth := range []string{"", "Authorization: Bearer " + h.token + "\r\n"} {
			resp, body := h.raw(method+" "+path+" HTTP/1.1\r\nHost: a\r\n"+auth+"Connection: close\r\n\r\n", false)
			want, code := http.StatusNotFound, codeNotFound
			if auth == "" {
				want, code = http.StatusUnauthorized, codeUnauthorized
			}
			h.checkProblem(resp.StatusCode, resp.Header, body, want, code, method+" "+path)
			if loc := resp.Header.Get("Location"); loc != "" {
				t.Fatalf("%s: Location %q", path, loc)
			}
		}
	}
}

// TestHalfClosedClientGetsItsAnswer: a client may shut down its sending
// side once its request is out (nc -N, some proxies). net/http then
// cancels the request's context as soon as it reads the EOF, and the
// ledger call under it failed with context.Canceled: a 500 for a request
// that was fine, in about one round of ten here. Fifty rounds catch it.
func TestHalfClosedClientGetsItsAnswer(t *testing.T) {
	h := newHarness(t)
	for i := range 50 {
		id := "acme-" + itoa(i)
		body := `{"id":"` + id + `"}`
		resp, b := h.raw("POST /v1/accounts HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+h.token+"\r\nContent-Length: "+
			itoa(len(body))+"\r\n\r\n"+body, true)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create after half-close: %d %s", resp.StatusCode, b)
		}
		resp, b = h.raw("GET /v1/accounts/"+id+" HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+h.token+"\r\n\r\n", true)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("get after half-close: %d %s", resp.StatusCode, b)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// closedWithin asserts that the server closes c within d (reading EOF or
// a reset, after any bytes it sends).
func closedWithin(t *testing.T, c net.Conn, d time.Duration) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("still open after %v", d)
	}
	return b
}

// TestSilentAndIdleConnectionsAreClosed: a socket that sends nothing is
// closed after the header timeout, a kept-alive one after the idle
// timeout, and one that stalls in its body after the read timeout.
func TestSilentAndIdleConnectionsAreClosed(t *testing.T) {
	h := newHarness(t)
	h.serve(Limits{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, ReadTimeout: 400 * time.Millisecond})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", h.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	start := time.Now()
	closedWithin(t, dial(), 2*time.Second)
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("closed after %v, before the header timeout", took)
	}

	c := dial()
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	closedWithin(t, c, 2*time.Second)

	c = dial()
	io.WriteString(c, "POST /v1/accounts HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+h.token+"\r\nContent-Length: 100\r\n\r\n{\"id\"")
	closedWithin(t, c, 2*time.Second)
	if _, err := h.store.Account(t.Context(), "a"); err == nil {
		t.Fatal("a stalled body created something")
	}
}

// TestConnectionCap: beyond MaxConns, while every held connection is
// serving a request, a connection is answered 503 too-many-connections
// and closed at once, holding nothing; once a slot frees, connections are
// served again.
func TestConnectionCap(t *testing.T) {
	h := newHarness(t)
	h.serve(Limits{MaxConns: 3, ReadHeaderTimeout: 10 * time.Second})
	held := h.busyConns(3)
	// The three are accepted and each is in a request (its handler waits
	// for the body); a fourth is refused.
	await.True(t, "three connections open", func() bool { return h.metricValue("tollgated_admin_connections") == 3 })
	for range 5 {
		c, err := net.Dial("tcp", h.addr())
		if err != nil {
			t.Fatal(err)
		}
		b := closedWithin(t, c, 2*time.Second)
		c.Close()
		if len(b) > 0 {
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
			if err != nil {
				t.Fatalf("refusal %q: %v", b, err)
			}
			body, _ := io.ReadAll(resp.Body)
			h.checkProblem(resp.StatusCode, resp.Header, body, http.StatusServiceUnavailable, codeTooManyConnections, "refusal")
		}
	}
	if n := h.metricValue("tollgated_admin_connections"); n != 3 {
		t.Fatalf("%v connections open", n)
	}
	if n := h.metricValue("tollgated_admin_connections_evicted_total"); n != 0 {
		t.Fatalf("%v busy connections evicted", n)
	}
	held[0].Close()
	await.True(t, "two connections open", func() bool { return h.metricValue("tollgated_admin_connections") == 2 })
	h.ok(http.StatusOK, "GET", "/v1/leases", "")
}

// busyConns opens n connections that are each in a request: an
// authenticated POST whose body never comes, so its handler waits. Each
// asks for 100-continue, which net/http sends once the handler reads the
// body: the connection is serving a request when busyConns returns.
func (h *harness) busyConns(n int) []net.Conn {
	h.t.Helper()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", h.addr())
		if err != nil {
			h.t.Fatal(err)
		}
		io.WriteString(c, "POST /v1/accounts HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer "+h.token+
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
			h.t.Fatalf("no 100 Continue: %q %v", line, err)
		}
		c.SetReadDeadline(time.Time{})
		conns = append(conns, c)
	}
	h.t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// TestUnauthenticatedRequestsDoNotHoldAPlace: a request without a valid
// token is answered 401 at once and its connection closed, whatever body
// it announces and however slowly it sends it: it holds no place of the
// listener while it trickles.
func TestUnauthenticatedRequestsDoNotHoldAPlace(t *testing.T) {
	h := newHarness(t)
	h.serve(Limits{MaxConns: 2, ReadTimeout: 20 * time.Second})
	for _, auth := range []string{"", "Authorization: Bearer wrong\r\n"} {
		c, err := net.Dial("tcp", h.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /v1/accounts HTTP/1.1\r\nHost: admin\r\n"+auth+"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		b := closedWithin(t, c, 2*time.Second)
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unauthenticated POST with a body to come: %q %v", b, err)
		}
	}
	h.ok(http.StatusOK, "GET", "/v1/leases", "")
}

// TestIdleSocketsGiveWayToARequest: sockets that hold the admin
// listener's places without sending a request — or idle after one — make
// way for a new connection at the bound, oldest first, so a request gets
// through however many there are; the listener still holds at most
// MaxConns of them. Connections serving a request are never evicted.
func TestIdleSocketsGiveWayToARequest(t *testing.T) {
	h := newHarness(t)
	h.serve(Limits{MaxConns: 4, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute})
	busy := h.busyConns(1)
	// A kept-alive connection, idle after its request.
	keep := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	req, _ := http.NewRequest("GET", h.url+"/v1/leases", nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := keep.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	for range 50 {
		c, err := net.Dial("tcp", h.addr())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	await.True(t, "47 connections evicted", func() bool { return h.metricValue("tollgated_admin_connections_evicted_total") >= 47 })
	start := time.Now()
	h.ok(http.StatusOK, "GET", "/v1/leases", "")
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a request beside 50 silent sockets took %v", took)
	}
	if n := h.metricValue("tollgated_admin_connections"); n > 4 {
		t.Fatalf("%v connections held, limit 4", n)
	}
	// The busy connection kept its place: its request still completes.
	io.WriteString(busy[0], `{"id":"kept"}`+strings.Repeat(" ", 100-len(`{"id":"kept"}`)))
	r, err := http.ReadResponse(bufio.NewReader(busy[0]), nil)
	if err != nil || r.StatusCode != http.StatusCreated {
		t.Fatalf("the busy connection's request: %v %v", r, err)
	}
}

// TestProfileOutlivesTheTimeouts: a CPU profile longer than the read and
// write timeouts is served whole; a second one meanwhile is 409 busy, not
// pprof's plain-text 500.
func TestProfileOutlivesTheTimeouts(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 2 s")
	}
	h := newHarness(t)
	h.serve(Limits{ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	var status int
	var body []byte
	go func() {
		defer wg.Done()
		status, _, body = h.call("GET", "/debug/pprof/profile?seconds=2", "")
	}()
	// The profile runs once its handler waits out its seconds, in
	// net/http/pprof's sleep, with the profile started and the lock held.
	await.True(t, "the CPU profile running", func() bool {
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("net/http/pprof.sleep("))
	})
	h.fails(http.StatusConflict, codeBusy, "GET", "/debug/pprof/trace?seconds=1", "")
	wg.Wait()
	if status != http.StatusOK || len(body) == 0 || time.Since(start) < 2*time.Second {
		t.Fatalf("profile: %d, %d bytes after %v", status, len(body), time.Since(start))
	}
}

func TestPprofQueriesAreChecked(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		path        string
		status      int
		code, field string
	}{
		{"/debug/pprof/profile?seconds=0", 400, codeInvalidQuery, "seconds"},
		{"/debug/pprof/profile?seconds=x", 400, codeInvalidQuery, "seconds"},
		{"/debug/pprof/trace?seconds=301", 400, codeInvalidQuery, "seconds"},
		{"/debug/pprof/heap?seconds=1&debug=1", 400, codeInvalidQuery, "debug"},
		{"/debug/pprof/cmdline?seconds=1", 400, codeInvalidQuery, "seconds"},
		{"/debug/pprof/heap?seconds=1&seconds=2", 400, codeDuplicateField, "seconds"},
		{"/debug/pprof/nope", 404, codeNotFound, ""},
		{"/debug/pprof/cmdline/x", 404, codeNotFound, ""},
		{"/debug/pprof/profile?nope=1", 400, codeInvalidQuery, "nope"},
		{"/debug/pprof/heap?debug=x", 400, codeInvalidQuery, "debug"},
		{"/debug/pprof/heap?debug=99999999999999999999", 400, codeInvalidQuery, "debug"},
		{"/debug/pprof/goroutine?debug=-1", 400, codeInvalidQuery, "debug"},
		{"/debug/pprof/heap?gc=yes", 400, codeInvalidQuery, "gc"},
	} {
		if p := h.fails(c.status, c.code, "GET", c.path, ""); p.Field != c.field {
			t.Errorf("%s: field %q, want %q", c.path, p.Field, c.field)
		}
	}
}

func TestPprofTakesItsDocumentedDebugLevels(t *testing.T) {
	h := newHarness(t)
	for _, path := range []string{"/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap?gc=1", "/debug/pprof/?debug=0"} {
		if st, _, b := h.call("GET", path, ""); st != http.StatusOK {
			t.Fatalf("%s: %d %s", path, st, b)
		}
	}
}

func TestHealthNeedsNoTokenAndSaysLittle(t *testing.T) {
	h := newHarness(t)
	for _, method := range []string{"GET", "HEAD"} {
		st, hdr, b := h.callAs("", method, "/healthz", "")
		if st != http.StatusOK || hdr.Get("Content-Type") != "application/json" || (method == "GET" && string(b) != "{\"status\":\"ok\"}\n") {
			t.Fatalf("%s /healthz: %d %q %s", method, st, hdr.Get("Content-Type"), b)
		}
	}
	st, hdr, b := h.callAs("", "POST", "/healthz", "")
	h.checkProblem(st, hdr, b, http.StatusMethodNotAllowed, codeMethodNotAllowed, "POST /healthz")
	h.store.failWith("AdminTokenDigest", errTest)
	st, hdr, b = h.callAs("", "GET", "/healthz", "")
	if p := h.checkProblem(st, hdr, b, http.StatusServiceUnavailable, codeUnavailable, "unhealthy"); strings.Contains(p.Detail, errTest.Error()) {
		t.Fatalf("health leaks its cause: %q", p.Detail)
	}
}

// TestHealthSaysWhenTheSpoolCannotTakeRecords: a full or failed usage
// spool makes /healthz 503 with its own code, and a spool with room again
// makes it 200.
func TestHealthSaysWhenTheSpoolCannotTakeRecords(t *testing.T) {
	h := newHarness(t)
	var state atomic.Uint32
	hasher, err := credential.NewHasher(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	h.srv, err = New(Config{Store: h.store, Hasher: hasher, Publisher: h.pub, Now: h.now.Load,
		Storage: func() StorageState { return StorageState(state.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	h.serve(Limits{})
	for _, c := range []struct {
		state StorageState
		code  string
	}{{StorageFull, codeStorageFull}, {StorageFailed, codeStorageFailed}} {
		state.Store(uint32(c.state))
		st, hdr, b := h.callAs("", "GET", "/healthz", "")
		h.checkProblem(st, hdr, b, http.StatusServiceUnavailable, c.code, "spool "+c.code)
	}
	state.Store(uint32(StorageOK))
	if st, _, b := h.callAs("", "GET", "/healthz", ""); st != http.StatusOK {
		t.Fatalf("/healthz with room again: %d %s", st, b)
	}
}

func TestLimitsDefaultsAndRefusals(t *testing.T) {
	l, err := Limits{MaxConns: 5}.withDefaults()
	d := DefaultLimits()
	if err != nil || l.MaxConns != 5 || l.ReadHeaderTimeout != d.ReadHeaderTimeout || l.MaxHeaderBytes != d.MaxHeaderBytes {
		t.Fatalf("%+v %v", l, err)
	}
	for _, bad := range []Limits{{MaxConns: -1}, {IdleTimeout: -1}, {MaxHeaderBytes: -1}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// metricValue reads a gauge or counter (without labels) from the
// Server's registry.
func (h *harness) metricValue(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	h.t.Fatalf("no metric %s", name)
	return 0
}
