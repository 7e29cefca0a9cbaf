package shard

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/invariant"
	"github.com/tollgated/tollgated/route"
)

// routedSnapshot is testSnapshot with a route table: chat costs one
// request (10 units), embeddings 100 input tokens or the gateway's count,
// completions are captured at 500 input tokens, admin paths are denied, and
// nothing else is admitted.
func routedSnapshot(t testing.TB, id core.AccountID) *core.Snapshot {
	t.Helper()
	pattern := func(s string) route.Pattern {
		p, err := route.ParsePattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	snap := testSnapshot(id)
	snap.Routes = &route.Table{Rules: []route.Rule{
		{Method: "POST", Pattern: pattern("/v1/chat"), Op: 1, Count: 1},
		{Pattern: pattern("/v1/embeddings"), Op: 0, Count: 100, CountHeader: "X-Token-Count"},
		{Method: "POST", Pattern: pattern("/v1/completions/**"), Op: 0, Count: 500, Capture: true, TTL: 5e9},
		{Pattern: pattern("/admin/**"), Deny: true},
	}}
	return snap
}

// provisionSnap installs snap with key, funded by units, and marks ready.
func (h *harness) provisionSnap(snap *core.Snapshot, key string, units core.CostUnits) {
	h.t.Helper()
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte(key))
	for _, m := range []message.Inbound{
		{Kind: message.InInstall, Snap: snap},
		{Kind: message.InBind, Principal: d.Principal(), Digest: d, Account: snap.Account},
		{Kind: message.InReady},
	} {
		if !h.in.Push(m) {
			h.t.Fatal("inbox full")
		}
	}
	h.s.Poll(t0)
	if units > 0 {
		h.grant(snap.Account, 1, units, t0)
	}
	if l, err := h.s.engine.Lease(snap.Account); err != nil || l.Units() != units {
		h.t.Fatalf("provisioning failed: lease %v", err)
	}
}

// authz sends one forward-auth call: method and uri are the call's own, and
// headers are "Name: value" lines.
func (h *harness) authz(method, uri string, headers ...string) *fasthttp.Response {
	h.t.Helper()
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	for _, kv := range headers {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	h.s.Serve(&Request{Req: req, Resp: resp, Now: t0 + 1, Defer: func() uint64 {
		h.tickets++
		h.parked[h.tickets] = resp
		return h.tickets
	}})
	return resp
}

// problem decodes a problem+json answer, failing on anything else.
func problem(t *testing.T, what string, resp *fasthttp.Response) map[string]any {
	t.Helper()
	var m map[string]any
	if ct := string(resp.Header.ContentType()); ct != "application/problem+json" {
		t.Fatalf("%s: %d with content type %q: %q", what, resp.StatusCode(), ct, resp.Body())
	}
	if err := json.Unmarshal(resp.Body(), &m); err != nil || m["status"] != float64(resp.StatusCode()) || m["title"] == "" {
		t.Fatalf("%s: not a problem: %q", what, resp.Body())
	}
	return m
}

func (h *harness) usageUnits() []core.CostUnits {
	var u []core.CostUnits
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			u = append(u, m.Usage.Units)
		}
	}
	return u
}

const bearerAcme = "Authorization: Bearer key-acme"

// TestAuthzAdmitsEachGatewaysShape: nginx's X-Original-*, Caddy's and
// Traefik's X-Forwarded-*, and Envoy's path suffix all describe the same
// request, which is admitted, billed at its route's price, and answered
// with the headers a gateway forwards.
func TestAuthzAdmitsEachGatewaysShape(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	h.drainOut()
	shapes := []struct {
		name, method, uri string
		headers           []string
	}{
		{"nginx", "GET", "/v1/authz", []string{"X-Original-Method: POST", "X-Original-URI: /v1/chat?stream=1"}},
		{"caddy", "GET", "/v1/authz", []string{"X-Forwarded-Method: POST", "X-Forwarded-Uri: /v1/chat"}},
		{"both agree", "GET", "/v1/authz", []string{"X-Original-Method: POST", "X-Original-URI: /v1/chat", "X-Forwarded-Method: POST", "X-Forwarded-Uri: /v1/chat"}},
		{"envoy", "POST", "/v1/authz/v1/chat?x=1", nil},
		{"normalised", "GET", "/v1/authz", []string{"X-Original-Method: POST", "X-Original-URI: /v1/./x/..//ch%61t"}},
	}
	for _, c := range shapes {
		resp := h.authz(c.method, c.uri, append(c.headers, bearerAcme)...)
		if resp.StatusCode() != 200 || len(resp.Body()) != 0 {
			t.Fatalf("%s: %d %q", c.name, resp.StatusCode(), resp.Body())
		}
		hdr := func(k string) string { return string(resp.Header.Peek(k)) }
		if hdr("X-Tollgate-Account") != "acme" || len(hdr("X-Tollgate-Request-Id")) != 32 || hdr("X-Tollgate-Units") != "10" {
			t.Fatalf("%s: headers %q", c.name, resp.Header.String())
		}
		if hdr("X-Tollgate-Reservation") != "" {
			t.Fatalf("%s: a billed request names a reservation", c.name)
		}
		if p := hdr("RateLimit-Policy"); p != `"requests";q=1000;w=1;tollgated-burst=1000` {
			t.Fatalf("%s: RateLimit-Policy %q", c.name, p)
		}
		if u := h.usageUnits(); len(u) != 1 || u[0] != 10 {
			t.Fatalf("%s: usage %v", c.name, u)
		}
	}
	if h.s.usageReserved != 0 || h.s.acks.claimed != 0 {
		t.Fatalf("leaked %d usage slots, %d ack claims", h.s.usageReserved, h.s.acks.claimed)
	}
}

func TestAuthzPricesRoutesDifferently(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	h.drainOut()
	cases := []struct {
		method, uri, count string
		units              core.CostUnits
	}{
		{"POST", "/v1/chat", "", 10},
		{"PUT", "/v1/embeddings", "", 100},
		{"GET", "/v1/embeddings", "7", 7},
	}
	for _, c := range cases {
		headers := []string{bearerAcme, "X-Original-Method: " + c.method, "X-Original-URI: " + c.uri}
		if c.count != "" {
			headers = append(headers, "X-Token-Count: "+c.count)
		}
		resp := h.authz("GET", "/v1/authz", headers...)
		if resp.StatusCode() != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.uri, resp.StatusCode(), resp.Body())
		}
		if u := h.usageUnits(); len(u) != 1 || u[0] != c.units {
			t.Fatalf("%s %s (count %q): billed %v, want %d", c.method, c.uri, c.count, u, c.units)
		}
	}
}

// TestAuthzKeyFromTheConfiguredHeader: the key is read from the header the
// daemon names (--authz-key-header), whole, and from nowhere else; by
// default from Authorization: Bearer. A request cannot choose: the
// X-Tollgate-Key-Header a client sends through Caddy is not read.
func TestAuthzKeyFromTheConfiguredHeader(t *testing.T) {
	orig := []string{"X-Original-Method: POST", "X-Original-URI: /v1/chat"}
	cases := []struct {
		name, keyHeader string
		headers         []string
		status          int
	}{
		{"x-api-key", "X-Api-Key", []string{"X-Api-Key: key-acme", "Authorization: Bearer key-nope"}, 200},
		{"bearer ignored when another header is configured", "X-Api-Key", []string{bearerAcme}, 401},
		{"wrong key", "X-Api-Key", []string{"X-Api-Key: key-nope"}, 401},
		{"key with a space", "X-Api-Key", []string{"X-Api-Key: key acme"}, 401},
		{"configured as authorization", "authorization", []string{"Authorization: bearer key-acme"}, 200},
		{"lowercase scheme", "", []string{"Authorization: bearer key-acme"}, 200},
		{"basic scheme", "", []string{"Authorization: Basic a2V5LWFjbWU="}, 401},
		{"a request naming its own key header", "", []string{"X-Tollgate-Key-Header: X-Api-Key", "X-Api-Key: key-acme", "Authorization: Bearer key-nope"}, 401},
		{"a request naming authorization", "", []string{"X-Tollgate-Key-Header: X-Api-Key", bearerAcme}, 200},
	}
	for _, c := range cases {
		h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
			AuthzKeyHeader: c.keyHeader}, 1024)
		h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
		resp := h.authz("GET", "/v1/authz", append(c.headers, orig...)...)
		if resp.StatusCode() != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode(), resp.Body(), c.status)
		}
		if c.status == 401 {
			if m := problem(t, c.name, resp); m["code"] != "unknown-principal" {
				t.Errorf("%s: code %v", c.name, m["code"])
			}
			if string(resp.Header.Peek("WWW-Authenticate")) != `Bearer realm="tollgated"` {
				t.Errorf("%s: 401 without a challenge", c.name)
			}
		}
	}
}

// TestAuthzRefusalsAreProblems: every way a forward-auth call is refused
// answers problem+json with a stable code (and the header at fault).
func TestAuthzRefusalsAreProblems(t *testing.T) {
	h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		FundingWait: NoFundingWait}, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 200)
	chat := []string{"X-Original-Method: POST", "X-Original-URI: /v1/chat"}
	cases := []struct {
		name, method, uri string
		headers           []string
		status            int
		code, field       string
	}{
		{"no key", "GET", "/v1/authz", chat, 401, "unknown-principal", ""},
		{"no method", "GET", "/v1/authz", []string{bearerAcme, "X-Original-URI: /v1/chat"}, 400, "missing-original-method", "X-Original-Method"},
		{"no uri", "GET", "/v1/authz", []string{bearerAcme, "X-Forwarded-Method: POST"}, 400, "missing-original-uri", "X-Original-URI"},
		{"bad method", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: PO@ST", "X-Original-URI: /v1/chat"}, 400, "invalid-original-method", "X-Original-Method"},
		{"long method", "GET", "/v1/authz", []string{bearerAcme, "X-Forwarded-Method: " + strings.Repeat("P", 25), "X-Forwarded-Uri: /v1/chat"}, 400, "invalid-original-method", "X-Forwarded-Method"},
		{"absolute uri", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: http://evil/v1/chat"}, 400, "invalid-original-uri", "X-Original-URI"},
		{"space in uri", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Forwarded-Uri: /v1/ch at"}, 400, "invalid-original-uri", "X-Forwarded-Uri"},
		{"bad escape", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/%zz"}, 400, "invalid-original-uri", "X-Original-URI"},
		{"cut escape", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/%4"}, 400, "invalid-original-uri", "X-Original-URI"},
		{"not utf-8", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/%ff%fe"}, 400, "invalid-original-uri", "X-Original-URI"},
		{"control byte", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/%00chat"}, 400, "invalid-original-uri", "X-Original-URI"},
		{"too long", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /" + strings.Repeat("a", MaxOriginalURI)}, 400, "original-uri-too-long", "X-Original-URI"},
		{"uris disagree", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/chat", "X-Forwarded-Uri: /v1/embeddings"}, 400, "conflicting-original-request", "X-Forwarded-Uri"},
		{"methods disagree", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: POST", "X-Forwarded-Method: GET", "X-Original-URI: /v1/chat"}, 400, "conflicting-original-request", "X-Forwarded-Method"},
		{"envoy path vs header", "POST", "/v1/authz/v1/chat", []string{bearerAcme, "X-Original-URI: /v1/embeddings"}, 400, "conflicting-original-request", "X-Original-URI"},
		{"envoy method vs header", "POST", "/v1/authz/v1/chat", []string{bearerAcme, "X-Forwarded-Method: GET"}, 400, "conflicting-original-request", "X-Forwarded-Method"},
		{"envoy bad path", "POST", "/v1/authz/v1/%ff", []string{bearerAcme}, 400, "invalid-original-uri", "path"},
		{"bad count", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: GET", "X-Original-URI: /v1/embeddings", "X-Token-Count: -3"}, 400, "invalid-count-header", "X-Token-Count"},
		{"huge count", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: GET", "X-Original-URI: /v1/embeddings", "X-Token-Count: 99999999999999999999"}, 400, "invalid-count-header", "X-Token-Count"},
		{"unmatched route", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: GET", "X-Original-URI: /v1/chat"}, 403, "route-not-allowed", ""},
		{"denied route", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: GET", "X-Original-URI: /admin/users"}, 403, "route-not-allowed", ""},
		{"too many items", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: GET", "X-Original-URI: /v1/embeddings", "X-Token-Count: 10001"}, 413, "request-too-large", ""},
		{"lease exhausted", "GET", "/v1/authz", []string{bearerAcme, "X-Original-Method: GET", "X-Original-URI: /v1/embeddings", "X-Token-Count: 300"}, 503, "lease-exhausted", ""},
	}
	for _, c := range cases {
		resp := h.authz(c.method, c.uri, c.headers...)
		m := problem(t, c.name, resp)
		if resp.StatusCode() != c.status || m["code"] != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, resp.StatusCode(), m, c.status, c.code)
		}
		if f, _ := m["field"].(string); f != c.field {
			t.Errorf("%s: field %q, want %q", c.name, f, c.field)
		}
		if ra := string(resp.Header.Peek("Retry-After")); c.status == 503 && ra != "1" {
			t.Errorf("%s: 503 with Retry-After %q, want 1", c.name, ra)
		}
	}
	if u := h.usageUnits(); len(u) != 0 {
		t.Fatalf("refusals billed %v", u)
	}
	if h.s.usageReserved != 0 || h.s.acks.claimed != 0 || h.s.engine.InFlight() != 0 {
		t.Fatalf("refusals leaked: %d usage slots, %d ack claims, %d reservations",
			h.s.usageReserved, h.s.acks.claimed, h.s.engine.InFlight())
	}
}

// TestEnvoySuffixNeverLeavesTheRoute: Envoy appends the client's path to
// /v1/authz as the client sent it, dot segments and escapes included. The
// call is the forward-auth route whatever that path resolves to: a suffix
// that normalises to /livez, /readyz or /v1/check must not be answered by
// that route (a 200 from /livez would let a request without a key through
// the gateway, unbilled).
func TestEnvoySuffixNeverLeavesTheRoute(t *testing.T) {
	h := newHarness(t, 0, 1024)
	snap := routedSnapshot(t, "acme")
	h.provisionSnap(snap, "key-acme", 100_000)
	h.drainOut()
	for _, c := range []struct {
		method, suffix string
		status         int
		code           string
	}{
		{"GET", "/../../livez", 403, "route-not-allowed"},               // no rule matches
		{"GET", "/x/..%2f..%2f..%2flivez", 400, "invalid-original-uri"}, // escaped separators are refused
		{"GET", "/%2e%2e/%2e%2e/readyz?x=1", 400, "invalid-original-uri"},
		{"POST", "/../check", 403, "route-not-allowed"},
		{"POST", "/../../v1/admission", 403, "route-not-allowed"},
	} {
		resp := h.authz(c.method, "/v1/authz"+c.suffix)
		if m := problem(t, c.suffix, resp); resp.StatusCode() != 401 || m["code"] != "unknown-principal" {
			t.Errorf("%s %s without a key: %d %v, want 401 unknown-principal", c.method, c.suffix, resp.StatusCode(), m)
		}
		resp = h.authz(c.method, "/v1/authz"+c.suffix, bearerAcme)
		if m := problem(t, c.suffix, resp); resp.StatusCode() != c.status || m["code"] != c.code {
			t.Errorf("%s %s with a key: %d %v, want %d %s", c.method, c.suffix, resp.StatusCode(), m, c.status, c.code)
		}
	}
	if u := h.usageUnits(); len(u) != 0 {
		t.Fatalf("billed %v", u)
	}
}

func TestAuthzWithoutRoutesRefusesEveryRoute(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/chat")
	if m := problem(t, "no routes", resp); resp.StatusCode() != 403 || m["code"] != "route-not-allowed" || m["retry"] != "never" {
		t.Fatalf("policy without routes: %d %v", resp.StatusCode(), m)
	}
}

func TestAuthzRateLimitCarriesRetryAfterAndRateLimit(t *testing.T) {
	h := newHarness(t, 0, 4096)
	snap := routedSnapshot(t, "acme")
	snap.Limits.RequestRate, snap.Limits.RequestBurst, snap.Limits.MaxConcurrent = 2, 3, 8
	h.provisionSnap(snap, "key-acme", 1<<40)
	chat := []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/chat"}
	// Each allowed answer says what the shard's share has left: a burst of
	// 3 at 2 a second, so 2, 1, 0 requests, and whole again in 1, 1, 2 s.
	for i, want := range []string{`"requests";r=2;t=1`, `"requests";r=1;t=1`, `"requests";r=0;t=2`} {
		resp := h.authz("GET", "/v1/authz", chat...)
		if resp.StatusCode() != 200 {
			t.Fatalf("within burst: %d %s", resp.StatusCode(), resp.Body())
		}
		if got := string(resp.Header.Peek("RateLimit")); got != want {
			t.Fatalf("allowed answer %d: RateLimit %q, want %q", i, got, want)
		}
		h.drainOut()
	}
	resp := h.authz("GET", "/v1/authz", chat...)
	m := problem(t, "over rate", resp)
	if resp.StatusCode() != 429 || m["code"] != "request-rate-limited" || m["retry_after_ms"] != float64(500) {
		t.Fatalf("over rate: %d %v", resp.StatusCode(), m)
	}
	hdr := func(k string) string { return string(resp.Header.Peek(k)) }
	// Retry-After: the next request may pass in 1 s (half a second, rounded
	// up); RateLimit's t: the share is full again in 2 (1.5 s), as the last
	// allowed answer said.
	if hdr("Retry-After") != "1" || hdr("RateLimit") != `"requests";r=0;t=2` ||
		hdr("RateLimit-Policy") != `"requests";q=2;w=1;tollgated-burst=3, "concurrency";q=8;qu="concurrent-requests"` {
		t.Fatalf("429 headers: %q", resp.Header.String())
	}
}

func TestAuthzConcurrencyRefusalNamesItsPolicy(t *testing.T) {
	h := newHarness(t, 0, 4096)
	snap := routedSnapshot(t, "acme")
	snap.Limits.MaxConcurrent = 1
	h.provisionSnap(snap, "key-acme", 1<<40)
	completion := []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/x"}
	if resp := h.authz("GET", "/v1/authz", completion...); resp.StatusCode() != 200 {
		t.Fatalf("first capture: %d %s", resp.StatusCode(), resp.Body())
	}
	resp := h.authz("GET", "/v1/authz", completion...)
	if m := problem(t, "second", resp); resp.StatusCode() != 429 || m["code"] != "concurrency-limited" {
		t.Fatalf("second capture while the first runs: %d %v", resp.StatusCode(), m)
	}
	if rl := string(resp.Header.Peek("RateLimit")); rl != `"concurrency";r=0` {
		t.Fatalf("RateLimit %q", rl)
	}
}

// TestAuthorizeThenCapture: a capture route commits a reservation for the
// quote and bills nothing yet; the service finishes it with what it used.
// One never finished is billed its quote at its deadline.
func TestAuthorizeThenCapture(t *testing.T) {
	h := newHarness(t, 2, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	h.drainOut()
	completion := []string{bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/gpt"}
	resp := h.authz("GET", "/v1/authz", completion...)
	res := string(resp.Header.Peek("X-Tollgate-Reservation"))
	if resp.StatusCode() != 200 || len(res) != reservationLen || res[:4] != "0002" || string(resp.Header.Peek("X-Tollgate-Units")) != "500" {
		t.Fatalf("capture: %d %q", resp.StatusCode(), resp.Header.String())
	}
	if u := h.usageUnits(); len(u) != 0 {
		t.Fatalf("a captured request was billed at once: %v", u)
	}
	h.bindPlatform()
	if st, b, _ := h.do("POST", "/v1/finish", platformToken, `{"reservation":"`+res+`","units":42}`); st != 200 || b["billed"] != float64(42) {
		t.Fatalf("finish = %d %v", st, b)
	}
	if u := h.usageUnits(); len(u) != 1 || u[0] != 42 {
		t.Fatalf("finish billed %v, want 42", u)
	}
	// Never finished: billed the quote once the rule's 5 s pass.
	resp = h.authz("GET", "/v1/authz", completion...)
	if resp.StatusCode() != 200 {
		t.Fatalf("second capture: %d", resp.StatusCode())
	}
	h.s.Poll(t0 + 4e9)
	if u := h.usageUnits(); len(u) != 0 {
		t.Fatalf("billed before the deadline: %v", u)
	}
	h.s.Poll(t0 + 6e9)
	var lapsed []core.UsageEvent
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			lapsed = append(lapsed, m.Usage)
		}
	}
	if len(lapsed) != 1 || !lapsed[0].Lapsed || lapsed[0].Units != 500 {
		t.Fatalf("unfinished capture: %+v", lapsed)
	}
}

// TestCaptureIsJournaledBeforeItsAnswer: a capture route commits a
// reservation, so like /v1/commit it journals the commit (a node killed
// before the service finishes bills the quote when it restarts), and the
// gateway's 200 waits until that entry is on disk.
func TestCaptureIsJournaledBeforeItsAnswer(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: 8}, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	h.drainOut()
	resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/gpt")
	if len(h.parked) != 1 {
		t.Fatalf("capture answered before its commit is durable: %d %q", resp.StatusCode(), resp.Header.String())
	}
	var journal []message.Outbound
	for _, m := range h.drainOut() {
		if m.Kind == message.OutCommit || m.Kind == message.OutUsage {
			journal = append(journal, m)
		}
	}
	if len(journal) != 1 || journal[0].Kind != message.OutCommit || journal[0].Usage.Units != 500 || journal[0].Usage.Quote != 500 {
		t.Fatalf("capture sent %+v, want one commit journal entry of 500", journal)
	}
	h.s.DurableMark().Publish(journal[0].Seq)
	h.s.Poll(t0 + 2)
	if len(h.parked) != 0 || resp.StatusCode() != 200 {
		t.Fatalf("after the journal is durable: %d parked, %d", len(h.parked), resp.StatusCode())
	}
	if id := string(resp.Header.Peek("X-Tollgate-Request-Id")); id != string(journal[0].Usage.RequestID.AppendHex(nil)) {
		t.Fatalf("answer names request %s, journal %x", id, journal[0].Usage.RequestID)
	}
	if h.s.usageReserved != 1 {
		t.Fatalf("%d usage slots reserved, want 1 (the open reservation's bill)", h.s.usageReserved)
	}
}

// TestAuthzAnswerWaitsForDurableUsageWithItsHeaders: a billed forward-auth
// answer is parked until its usage is on disk, and comes back with its
// headers.
func TestAuthzAnswerWaitsForDurableUsageWithItsHeaders(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: 8}, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	long := core.AccountID(strings.Repeat("a", core.MaxAccountIDLen))
	snap := routedSnapshot(t, long)
	snap.Limits.RequestRate, snap.Limits.RequestBurst, snap.Limits.MaxConcurrent = 4294967295, 4294967295, 2147483647
	h.provisionSnap(snap, "key-long", 100_000)
	for _, c := range []struct{ key, account, policy, left string }{
		{"key-acme", "acme", `"requests";q=1000;w=1;tollgated-burst=1000`, `"requests";r=999;t=1`},
		// The longest answer there is: it must fit the parked entry.
		{"key-long", string(long), `"requests";q=4294967295;w=1;tollgated-burst=4294967295, "concurrency";q=2147483647;qu="concurrent-requests"`,
			`"requests";r=4294967294;t=1`},
	} {
		resp := h.authz("GET", "/v1/authz", "Authorization: Bearer "+c.key, "X-Original-Method: POST", "X-Original-URI: /v1/chat")
		if len(h.parked) != 1 {
			t.Fatalf("%s: answer sent before its usage is durable: %d %q", c.account, resp.StatusCode(), resp.Header.String())
		}
		resp.Reset() // what the handler wrote must come back from the queue
		h.s.DurableMark().Publish(h.s.usageSeq)
		h.s.Poll(t0 + 2)
		hdr := func(k string) string { return string(resp.Header.Peek(k)) }
		if resp.StatusCode() != 200 || hdr("X-Tollgate-Account") != c.account || len(hdr("X-Tollgate-Request-Id")) != 32 ||
			hdr("X-Tollgate-Units") != "10" || hdr("RateLimit-Policy") != c.policy || hdr("RateLimit") != c.left || len(resp.Body()) != 0 {
			t.Fatalf("%s: released answer %d %q %q", c.account, resp.StatusCode(), resp.Header.String(), resp.Body())
		}
	}
	if n := invariant.Count(invariant.AckOversize); n != 0 {
		t.Fatalf("%d answers too large to park", n)
	}
}

// TestAuthzWaitsForFundingLikeCheck: a forward-auth call that finds no
// funding waits for the grant, then is answered with its headers.
func TestAuthzWaitsForFundingLikeCheck(t *testing.T) {
	h := newHarness(t, 0, 1024)
	snap := routedSnapshot(t, "acme")
	snap.Limits.RequestRate, snap.Limits.RequestBurst = 10, 10
	h.provisionSnap(snap, "key-acme", 0)
	resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/x")
	if len(h.parked) != 1 {
		t.Fatalf("not parked: %d %q", resp.StatusCode(), resp.Body())
	}
	h.grant("acme", 1, 100_000, t0+3)
	if resp.StatusCode() != 200 || len(resp.Header.Peek("X-Tollgate-Reservation")) != reservationLen ||
		string(resp.Header.Peek("X-Tollgate-Account")) != "acme" ||
		// Its rate token was taken before the wait; the answer still says
		// what is left.
		string(resp.Header.Peek("RateLimit")) != `"requests";r=9;t=1` {
		t.Fatalf("after the grant: %d %q", resp.StatusCode(), resp.Header.String())
	}
	if u := h.usageUnits(); len(u) != 0 {
		t.Fatalf("a captured request that waited was billed: %v", u)
	}
}

// TestAuthzAllocatesNothingWhenWarm: each shape of a forward-auth call,
// admitted and billed, allocates nothing once warm.
func TestAuthzAllocatesNothingWhenWarm(t *testing.T) {
	for _, c := range []struct {
		name, method, uri string
		headers           []string
	}{
		{"nginx", "GET", "/v1/authz", []string{"X-Original-Method: POST", "X-Original-URI: /v1/chat?stream=true", bearerAcme}},
		{"caddy", "GET", "/v1/authz", []string{"X-Forwarded-Method: GET", "X-Forwarded-Uri: /v1/embeddings", "X-Token-Count: 12", bearerAcme}},
		{"envoy", "POST", "/v1/authz/v1/./chat", []string{bearerAcme}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 0, 1<<16)
			snap := routedSnapshot(t, "acme")
			snap.Limits.RequestRate, snap.Limits.RequestBurst, snap.Limits.MaxConcurrent = 1e6, 1e6, 100
			h.provisionSnap(snap, "key-acme", 1<<50)
			req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
			req.Header.SetMethod(c.method)
			req.SetRequestURI(c.uri)
			for _, kv := range c.headers {
				k, v, _ := strings.Cut(kv, ": ")
				req.Header.Set(k, v)
			}
			now := t0
			r := &Request{Req: req, Resp: resp}
			requireNoAllocsWhenWarm(t, "/v1/authz ("+c.name+")", func() {
				now += 2e6
				r.Now = now
				h.s.Serve(r)
				if resp.StatusCode() != 200 {
					t.Fatalf("authz = %d %s", resp.StatusCode(), resp.Body())
				}
				h.out.Ring().Pop()
			})
		})
	}
}

// TestCaptureAndFinishAllocateNothingWhenWarm: a capture route's call
// (admitted, committed, journaled) and the finish that bills it allocate
// nothing once warm.
func TestCaptureAndFinishAllocateNothingWhenWarm(t *testing.T) {
	h := newHarness(t, 0, 1<<16)
	snap := routedSnapshot(t, "acme")
	snap.Limits.RequestRate, snap.Limits.RequestBurst = 1e6, 1e6
	h.provisionSnap(snap, "key-acme", 1<<50)
	h.bindPlatform()
	capture, finish := fasthttp.AcquireRequest(), fasthttp.AcquireRequest()
	capture.Header.SetMethod("GET")
	capture.SetRequestURI("/v1/authz")
	capture.Header.Set("Authorization", "Bearer key-acme")
	capture.Header.Set("X-Original-Method", "POST")
	capture.Header.Set("X-Original-URI", "/v1/completions/gpt")
	finish.Header.SetMethod("POST")
	finish.SetRequestURI("/v1/finish")
	finish.Header.Set("Authorization", "Bearer "+platformToken)
	body := []byte(`{"reservation":"` + strings.Repeat("0", reservationLen) + `","units":42}`)
	resp := &fasthttp.Response{}
	c, f := &Request{Req: capture, Resp: resp, Now: t0}, &Request{Req: finish, Resp: resp, Now: t0}
	requireNoAllocsWhenWarm(t, "/v1/authz capture + /v1/finish", func() {
		c.Now += 2e6
		h.s.Serve(c)
		res := resp.Header.Peek("X-Tollgate-Reservation")
		if resp.StatusCode() != 200 || len(res) != reservationLen {
			t.Fatalf("capture = %d %s", resp.StatusCode(), resp.Body())
		}
		copy(body[16:16+reservationLen], res)
		finish.SetBodyRaw(body)
		f.Now = c.Now
		h.s.Serve(f)
		if resp.StatusCode() != 200 {
			t.Fatalf("finish = %d %s", resp.StatusCode(), resp.Body())
		}
		h.out.Ring().Pop() // the journal entry
		h.out.Ring().Pop() // the bill
	})
}

func TestAuthzRefusalAllocatesNothingWhenWarm(t *testing.T) {
	h := newHarness(t, 0, 1<<16)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 1<<50)
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("GET")
	req.SetRequestURI("/v1/authz")
	req.Header.Set("Authorization", "Bearer key-acme")
	req.Header.Set("X-Original-Method", "DELETE")
	req.Header.Set("X-Original-URI", "/admin/users/%61")
	r := &Request{Req: req, Resp: resp}
	requireNoAllocsWhenWarm(t, "/v1/authz refusal", func() {
		r.Now += 1e6
		h.s.Serve(r)
		if resp.StatusCode() != 403 {
			t.Fatalf("authz = %d %s", resp.StatusCode(), resp.Body())
		}
	})
}

// TestExhaustedBudgetSaysWhenItsPeriodEnds: a 402 for a budget with a
// period carries reset_at and Retry-After until the reset that funds it,
// on /v1/authz as on /v1/check (the next allowance is what changes the
// answer); reset_at is null when no reset will.
func TestExhaustedBudgetSaysWhenItsPeriodEnds(t *testing.T) {
	h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		FundingWait: NoFundingWait}, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 0)
	cell := new(core.EvidenceCell)
	h.in.Push(message.Inbound{Kind: message.InEvidence, Account: "acme", Evidence: cell})
	h.s.Poll(t0)
	cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: t0 + 3600e9 + 1, PeriodEnd: t0 + 3600e9 + 1, Next: core.MaxCostUnits,
		Ceiling: core.MaxCostUnits})
	resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/chat")
	if m := problem(t, "authz", resp); resp.StatusCode() != 402 || m["code"] != "balance-exhausted" ||
		string(resp.Header.Peek("Retry-After")) != "3600" {
		t.Fatalf("authz over budget: %d %v, Retry-After %q", resp.StatusCode(), m, resp.Header.Peek("Retry-After"))
	}
	st, body, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	if st != 402 || body["retry_after_ms"] != float64(3600e3) || string(resp.Header.Peek("Retry-After")) != "3600" ||
		body["reset_at"] != time.Unix(0, t0+3600e9+1).UTC().Format(time.RFC3339) {
		t.Fatalf("check over budget: %d %v, Retry-After %q", st, body, resp.Header.Peek("Retry-After"))
	}
	// No reset funds it: reset_at null, no Retry-After.
	cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: t0 + 3600e9 + 1, Next: 1, Ceiling: 1})
	st, body, resp = h.do("POST", "/v1/check", "key-acme", chatBody)
	if v, ok := body["reset_at"]; st != 402 || !ok || v != nil || len(resp.Header.Peek("Retry-After")) != 0 {
		t.Fatalf("check beyond any reset: %d %v, Retry-After %q", st, body, resp.Header.Peek("Retry-After"))
	}
}

// BenchmarkAuthz is one forward-auth call as nginx sends it, admitted and
// billed (without the durable acknowledgement, which waits for a disk), the
// same call for a route the policy refuses, and for comparison the same
// work as a /v1/check.
func BenchmarkAuthz(b *testing.B) {
	for _, c := range []struct{ name, uri string }{{"admitted", "/v1/chat?stream=true"}, {"refused", "/admin/users"}, {"check", ""}} {
		b.Run(c.name, func(b *testing.B) {
			h := newHarness(b, 0, 1<<16)
			snap := routedSnapshot(b, "acme")
			snap.Limits.RequestRate, snap.Limits.RequestBurst = 1e9, 1e9
			h.provisionSnap(snap, "key-acme", 1<<60)
			req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
			req.Header.Set("Authorization", "Bearer key-acme")
			if c.uri == "" {
				req.Header.SetMethod("POST")
				req.SetRequestURI("/v1/check")
				req.SetBodyString(`{"workload":[{"op":"requests","count":1}]}`)
			} else {
				req.Header.SetMethod("GET")
				req.SetRequestURI("/v1/authz")
				req.Header.Set("X-Original-Method", "POST")
				req.Header.Set("X-Original-URI", c.uri)
			}
			r := &Request{Req: req, Resp: resp, Now: t0}
			b.ReportAllocs()
			for b.Loop() {
				r.Now += 1000
				h.s.Serve(r)
				h.out.Ring().Pop()
			}
		})
	}
}
