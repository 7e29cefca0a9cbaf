//go:build linux

package gateways

import (
	"bufio"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// The hostile-gateway corpus: what a client can send through the example
// gateways to pay less than the route says, or to reach a denied route
// with a valid key. Each case runs through the real gateway, in front of a
// real tollgated and a recording service; the direct half (calls on
// /v1/authz itself) is in shard/authz_hostile_test.go.

// rawResult is a response to a request written byte for byte.
type rawResult struct {
	status int
	body   string
}

// sendRaw writes one HTTP/1.1 request to addr as given — a request-target
// Go's client would escape or cut ('#', '\'), a lower-case method — and
// reads the answer.
func sendRaw(t *testing.T, addr, method, target string, headers ...string) rawResult {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResult{resp.StatusCode, string(b)}
}

// editRule changes the example policy's rule for path.
func editRule(path string, edit func(rule map[string]any)) func(map[string]any) {
	return func(p map[string]any) {
		for _, r := range p["routes"].(map[string]any)["rules"].([]any) {
			if r := r.(map[string]any); r["path"] == path {
				edit(r)
			}
		}
	}
}

// shortTTL gives a capture rule a deadline a test can wait for.
func shortTTL(rule map[string]any) {
	if rule["capture"] == true {
		rule["ttl_ms"] = 300
	}
}

// hostileGateway is one example configuration under attack.
type hostileGateway struct {
	name string
	base string // http://listen
	// refusal is the status a client gets for a refusal other than 401 and
	// 403: tollgated's 400 (complete nginx, Caddy), or nginx's 500 (the
	// minimal configuration).
	refusal int
	// lowercaseRefusal is the answer to a lower-case method: nginx
	// refuses it itself (400), Caddy forwards it to tollgated.
	lowercaseRefusal int
	// streamsBodies: the gateway proxies a body as it arrives (Caddy), so
	// the service sees an upload the gateway then cuts off.
	streamsBodies bool
}

func (g hostileGateway) addr() string { return strings.TrimPrefix(g.base, "http://") }

// runHostileScenarios runs every case of the corpus through gateway g,
// each as a subtest (with the daemon's helpers failing that subtest).
func runHostileScenarios(t *testing.T, d *daemon, app *upstream, g hostileGateway) {
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *daemon, *upstream, hostileGateway)
	}{
		{"ambiguous forms", hostileForms}, {"client-chosen key header", hostileKeyHeader},
		{"client-chosen count", hostileCount}, {"captures", hostileCaptures},
		{"refused and empty uploads", hostileUploads},
	} {
		t.Run(sc.name, func(t *testing.T) {
			sub := *d
			sub.t = t
			sc.run(t, &sub, app, g)
		})
	}
}

// seenCount is how many requests the service has seen.
func (u *upstream) seenCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.requests)
}

// hostileForms: every original request a service may read as a costlier
// or denied route than its literal one — a raw '#', ';' parameters and
// "..;", a backslash, escaped separators and double encoding, trailing dots
// and spaces, method overrides, a lower-case method — is refused before the
// service sees it, and billed nothing.
func hostileForms(t *testing.T, d *daemon, app *upstream, g hostileGateway) {
	acct := g.name + "-forms"
	key := d.account(acct, 1<<30, nil)
	auth := "Authorization: Bearer " + key
	cases := []struct {
		name, method, target string
		headers              []string
		status               int
	}{
		{"raw '#' hiding a denied path", "GET", "/x#/../admin/secret", nil, g.refusal},
		{"raw '#' hiding a costly route", "POST", "/x#/../v1/completions", nil, g.refusal},
		{"a ';' parameter", "POST", "/v1/completions;jsessionid=1", nil, g.refusal},
		{"..; (Tomcat's parent)", "GET", "/x/..;/admin/secret", nil, g.refusal},
		{"a backslash", "GET", `/admin\secret`, nil, g.refusal},
		{"escaped dots", "GET", "/admin/%2e%2e/v1/models", nil, g.refusal},
		{"escaped slashes", "GET", "/admin/x%2f..%2f..%2fv1%2fmodels", nil, g.refusal},
		{"double encoding", "GET", "/v1/%252e%252e/admin/secret", nil, g.refusal},
		{"a trailing dot", "POST", "/v1/completions.", nil, g.refusal},
		{"a trailing dot on a denied prefix", "GET", "/admin./secret", nil, g.refusal},
		{"X-HTTP-Method-Override", "GET", "/v1/completions", []string{"X-HTTP-Method-Override: POST"}, g.refusal},
		{"X-HTTP-Method", "GET", "/v1/completions", []string{"X-HTTP-Method: POST"}, g.refusal},
		{"X-Method-Override", "GET", "/v1/completions", []string{"X-Method-Override: POST"}, g.refusal},
		{"a _method parameter", "GET", "/v1/completions?_method=POST", nil, g.refusal},
		{"a lower-case method", "post", "/v1/completions", nil, g.lowercaseRefusal},
	}
	for _, c := range cases {
		before := app.seenCount()
		r := sendRaw(t, g.addr(), c.method, c.target, append(c.headers, auth)...)
		if r.status != c.status {
			t.Errorf("%s (%s %s): %d %q, want %d", c.name, c.method, c.target, r.status, r.body, c.status)
		}
		if n := app.seenCount(); n != before {
			t.Errorf("%s: the service saw it as %s %s", c.name, app.seen()[n-1].method, app.seen()[n-1].target)
		}
	}
	if u := d.usageAfterSentinel(g, key, acct, 0); fmt.Sprint(u) != "[10]" {
		t.Fatalf("billed %v, want only the models list's [10]", u)
	}
}

// hostileKeyHeader: a client cannot choose where tollgated reads its key
// (X-Tollgate-Key-Header names a header of its own): only the daemon's
// --authz-key-header can.
func hostileKeyHeader(t *testing.T, d *daemon, app *upstream, g hostileGateway) {
	acct := g.name + "-keyheader"
	key := d.account(acct, 1<<30, nil)
	before := app.seenCount()
	r := sendRaw(t, g.addr(), "POST", "/v1/chat", "Authorization: Bearer tgk_not-a-key",
		"X-Tollgate-Key-Header: X-Api-Key", "X-Api-Key: "+key)
	if r.status != 401 || app.seenCount() != before {
		t.Fatalf("a client-named key header: %d %q, the service saw %d", r.status, r.body, app.seenCount()-before)
	}
}

// hostileCount: the count of a size-priced route is the gateway's
// Content-Length, never a client's X-Content-Length: a 1 MiB upload that
// claims 1 byte holds 1 MiB and is billed the 1 MiB the service received.
func hostileCount(t *testing.T, d *daemon, app *upstream, g hostileGateway) {
	acct := g.name + "-count"
	key := d.account(acct, 1<<30, nil)
	body := strings.Repeat("x", 1<<20)
	r := send(t, "PUT", g.base+"/v1/files/big.bin", key, body, "X-Content-Length: 1")
	if r.status != 200 {
		t.Fatalf("upload: %d %q", r.status, r.body)
	}
	last := app.seen()[app.seenCount()-1]
	if got := last.header.Get("X-Tollgate-Units"); g.name != "nginx-minimal" && got != strconv.Itoa(len(body)) {
		t.Fatalf("the upload held %s units, want %d", got, len(body))
	}
	if u := d.usage(acct, 1); len(u) != 1 || u[0] != float64(len(body)) {
		t.Fatalf("a 1 MiB upload claiming 1 byte was billed %v, want [%d]", u, len(body))
	}
}

// hostileCaptures: a capture's reservation id is unguessable and answers
// only to the service's platform token — the customer cannot settle it at
// 0 — and what an unfinished capture bills at its deadline is its route's
// choice: the completion (a lost finish is never free) its quote, the
// upload (what the service never saw is never billed) nothing.
func hostileCaptures(t *testing.T, d *daemon, app *upstream, g hostileGateway) {
	acct := g.name + "-captures"
	key := d.account(acct, 1<<30, func(p map[string]any) {
		editRule("/v1/completions", shortTTL)(p)
		editRule("/v1/files/**", shortTTL)(p)
	})
	var ids []string
	for range 2 {
		if r := send(t, "POST", g.base+"/v1/completions", key, `{}`, "X-Test-Unfinished: 1", "X-Test-Status: 500"); r.status != 500 {
			t.Fatalf("completion the service failed: %d %q", r.status, r.body)
		}
		ids = append(ids, app.seen()[app.seenCount()-1].header.Get("X-Tollgate-Reservation"))
	}
	if len(ids[0]) != 36 || len(ids[1]) != 36 {
		t.Fatalf("reservation ids %q", ids)
	}
	if d := hexBits(ids[0][4:], ids[1][4:]); d < 32 {
		t.Fatalf("consecutive reservation ids %s and %s differ in %d bits", ids[0], ids[1], d)
	}
	// The customer's key cannot finish (or cancel) what its request
	// opened: the reservation is not its to know.
	for _, op := range []string{"finish", "cancel"} {
		req, _ := http.NewRequest("POST", "http://"+d.listen+"/v1/"+op, strings.NewReader(`{"reservation":"`+ids[0]+`"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("the customer's %s of its capture: %d %s", op, resp.StatusCode, b)
		}
	}
	// An upload the service fails without reporting.
	if r := send(t, "PUT", g.base+"/v1/files/lost.bin", key, "abc", "X-Test-Unfinished: 1", "X-Test-Status: 500"); r.status != 500 {
		t.Fatalf("upload the service failed: %d %q", r.status, r.body)
	}
	d.awaitNoReservations()
	if u := d.usageAfterSentinel(g, key, acct, 2); fmt.Sprint(u) != "[10 4000 4000]" {
		t.Fatalf("unfinished captures billed %v, want the completions' quotes (and the models list's 10), nothing for the upload", u)
	}
}

// hexBits counts the bits in which two hex strings differ.
func hexBits(a, b string) int {
	n := 0
	for i := range a {
		x, _ := strconv.ParseUint(a[i:i+1], 16, 8)
		y, _ := strconv.ParseUint(b[i:i+1], 16, 8)
		n += bits.OnesCount64(x ^ y)
	}
	return n
}

// awaitNoReservations waits until tollgated holds no reservation (every
// capture has ended, finished or lapsed), nudging it: an idle shard sweeps
// deadlines when it next wakes.
func (d *daemon) awaitNoReservations() {
	d.t.Helper()
	held := -1.0
	released := await.Poll(await.Default, func() bool {
		if resp, err := http.Get("http://" + d.listen + "/livez"); err == nil {
			resp.Body.Close()
		}
		req, _ := http.NewRequest("GET", "http://"+d.admin+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			d.t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		held = -1.0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "tollgated_reservations_in_flight{") {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				held = max(held, 0) + v
			}
		}
		return held == 0
	})
	if !released {
		d.t.Fatalf("reservations still held (%v) after %v", held, await.Default)
	}
}

// usageAfterSentinel sends one more request (the models list, 10 units)
// and returns, in ascending order, the units of id's ledger usage once its
// bill is there: the spool is exported in order, so every earlier bill is
// there too. A bill of 0 units is no bill (the ledger rejects it).
func (d *daemon) usageAfterSentinel(g hostileGateway, key, id string, before int) []float64 {
	d.t.Helper()
	if r := send(d.t, "GET", g.base+"/v1/models", key, ""); r.status != 200 {
		d.t.Fatalf("models: %d %q", r.status, r.body)
	}
	u := d.usage(id, before+1)
	slices.Sort(u)
	return u
}

// hostileUploads: a chunked upload the gateway refuses (413, over its
// body limit) after tollgated admitted it never reaches the service and is
// never billed; an empty upload costs nothing.
func hostileUploads(t *testing.T, d *daemon, app *upstream, g hostileGateway) {
	acct := g.name + "-uploads"
	key := d.account(acct, 1<<30, editRule("/v1/files/**", shortTTL))
	before := app.seenCount()
	req, _ := http.NewRequest("PUT", g.base+"/v1/files/huge.bin", io.MultiReader(strings.NewReader(strings.Repeat("x", 1<<20+1024))))
	req.Header.Set("Authorization", "Bearer "+key)
	req.TransferEncoding = []string{"chunked"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("a chunked upload over the limit: %d", resp.StatusCode)
	}
	// nginx reads the body before it proxies; Caddy streams it, so the
	// service gets it cut off, fails it and reports nothing.
	if n := app.seenCount(); n != before && !g.streamsBodies {
		t.Fatalf("the service saw the refused upload: %+v", app.seen()[n-1])
	}
	if r := send(t, "PUT", g.base+"/v1/files/empty.bin", key, ""); r.status != 200 {
		t.Fatalf("an empty upload: %d %q", r.status, r.body)
	}
	d.awaitNoReservations()
	if u := d.usageAfterSentinel(g, key, acct, 0); fmt.Sprint(u) != "[10]" {
		t.Fatalf("a refused and an empty upload billed %v, want nothing (and the models list's [10])", u)
	}
}

// TestHostileClientsThroughNginx runs the corpus through the complete
// nginx configuration.
func TestHostileClientsThroughNginx(t *testing.T) {
	requireTool(t, "nginx", "/usr/sbin/nginx")
	d := startTollgated(t)
	app := newUpstream(t, d.listen, d.platformToken())
	listen := freePort(t)
	startNginx(t, "nginx/tollgated.conf", listen, d.listen, strings.TrimPrefix(app.URL, "http://"))
	runHostileScenarios(t, d, app, hostileGateway{"nginx", "http://" + listen, 400, 400, false})
}

// TestHostileClientsThroughNginxMinimal runs it through the guide's short
// configuration: every refusal but 401 and 403 is nginx's 500 there.
func TestHostileClientsThroughNginxMinimal(t *testing.T) {
	requireTool(t, "nginx", "/usr/sbin/nginx")
	d := startTollgated(t)
	app := newUpstream(t, d.listen, d.platformToken())
	listen := freePort(t)
	startNginx(t, "nginx/minimal.conf", listen, d.listen, strings.TrimPrefix(app.URL, "http://"))
	runHostileScenarios(t, d, app, hostileGateway{"nginx-minimal", "http://" + listen, 500, 400, false})
}

// TestHostileClientsThroughCaddy runs it through the Caddyfile, and checks
// what only Caddy's example could get wrong: no unreplaced placeholder
// reaches the service.
func TestHostileClientsThroughCaddy(t *testing.T) {
	requireTool(t, "caddy")
	d := startTollgated(t)
	app := newUpstream(t, d.listen, d.platformToken())
	listen := freePort(t)
	startCaddy(t, listen, d.listen, strings.TrimPrefix(app.URL, "http://"))
	runHostileScenarios(t, d, app, hostileGateway{"caddy", "http://" + listen, 400, 400, true})
	for _, s := range app.seen() {
		for name, values := range s.header {
			for _, v := range values {
				if strings.Contains(v, "{http.") {
					t.Fatalf("the service got %s: %s on %s %s", name, v, s.method, s.target)
				}
			}
		}
	}
}

// TestCaddyListensOnLoopbackOnly: the example binds 127.0.0.1; a site
// address alone would listen on every interface.
func TestCaddyListensOnLoopbackOnly(t *testing.T) {
	requireTool(t, "caddy")
	listen := freePort(t)
	startCaddy(t, listen, freePort(t), freePort(t))
	_, port, _ := net.SplitHostPort(listen)
	p, _ := strconv.Atoi(port)
	local := listeners(t, p)
	if len(local) == 0 {
		t.Fatalf("nothing listens on port %d", p)
	}
	for _, a := range local {
		if a != "0100007F" {
			t.Fatalf("Caddy listens on %s (hex, /proc/net/tcp*), not only 127.0.0.1: %v", a, local)
		}
	}
}

// listeners returns the local addresses (as /proc/net/tcp and tcp6 write
// them) of the sockets listening on port.
func listeners(t *testing.T, port int) []string {
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			addr, hexPort, _ := strings.Cut(fields[1], ":")
			if p, _ := strconv.ParseUint(hexPort, 16, 16); int(p) == port {
				out = append(out, addr)
			}
		}
	}
	return out
}

// TestCaddyBoundsTheWaitForTollgated: a tollgated that accepts and never
// answers holds a client for the forward_auth timeout (the funding wait
// plus the durable write, rounded up), then refuses it; the service never
// sees it.
func TestCaddyBoundsTheWaitForTollgated(t *testing.T) {
	requireTool(t, "caddy")
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered, until the test ends
		}
	}()
	app := newUpstream(t, "127.0.0.1:1", "unused")
	listen := freePort(t)
	startCaddy(t, listen, hole.Addr().String(), strings.TrimPrefix(app.URL, "http://"))
	start := time.Now()
	req, _ := http.NewRequest("POST", "http://"+listen+"/v1/chat", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer tgk_any")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("no answer within 10 s of a silent tollgated: %v", err)
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode < 500 || took > 5*time.Second {
		t.Fatalf("a silent tollgated: %d after %v", resp.StatusCode, took)
	}
	if n := app.seenCount(); n != 0 {
		t.Fatalf("the service saw %d requests", n)
	}
}

// TestEveryConfigSetsWhatTollgatedReads: each nginx configuration (and the
// guide's snippets) passes tollgated no client header but the ones it
// sets, and each Caddy one clears the original-request headers forward_auth
// does not set and sets the count header — so a client's own copy of a
// header tollgated reads never reaches it.
func TestEveryConfigSetsWhatTollgatedReads(t *testing.T) {
	nginxNeeds := []string{"proxy_pass_request_headers off;", "proxy_set_header Authorization $http_authorization;",
		"proxy_set_header X-Original-Method $request_method;", "proxy_set_header X-Original-URI $request_uri;",
		"proxy_set_header X-Content-Length $content_length;",
		"proxy_set_header X-HTTP-Method-Override $http_x_http_method_override;",
		"proxy_set_header X-HTTP-Method $http_x_http_method;", "proxy_set_header X-Method-Override $http_x_method_override;"}
	caddyNeeds := []string{"header_up -X-Original-Method", "header_up -X-Original-URI",
		"header_up X-Content-Length {http.request.header.Content-Length}"}
	check := func(what, text string, needs []string) {
		t.Helper()
		for _, n := range needs {
			if !strings.Contains(text, n) {
				t.Errorf("%s lacks %q", what, n)
			}
		}
	}
	for _, f := range []string{"nginx/minimal.conf", "nginx/tollgated.conf"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check(f, string(b), nginxNeeds)
	}
	b, err := os.ReadFile("caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	check("caddy/Caddyfile", string(b), caddyNeeds)
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "GATEWAYS.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for i, block := range strings.Split(string(guide), "```")[1:] {
		if i%2 != 0 { // the text between two blocks
			continue
		}
		lang, code, _ := strings.Cut(block, "\n")
		switch {
		case lang == "nginx" && strings.Contains(code, "/v1/authz"):
			check("docs/GATEWAYS.md's nginx snippet", code, nginxNeeds)
			blocks++
		case lang == "caddyfile" && strings.Contains(code, "forward_auth"):
			check("docs/GATEWAYS.md's Caddy snippet", code, caddyNeeds)
			blocks++
		}
	}
	if blocks < 2 {
		t.Fatalf("found %d gateway snippets in docs/GATEWAYS.md, want the nginx and the Caddy one", blocks)
	}
}
