package shard

import (
	"encoding/json"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/route"
)

// authzStatuses are the statuses docs/API.md lists for /v1/authz (a
// call whose URI is not /v1/authz, /v1/authz?… or /v1/authz/… as sent,
// "/v1/authzx/../check" say, is another route's, and may be its 404/405).
var authzStatuses = map[int]bool{200: true, 400: true, 401: true, 402: true, 403: true, 404: true, 405: true,
	409: true, 413: true, 422: true, 429: true, 503: true}

// FuzzAuthz sends forward-auth calls with arbitrary descriptions of the
// original request through Shard.Serve, under routes with a cheap default
// and the default URI rules: no input panics, every answer has a
// documented status, every refusal is problem+json with its status and a
// code, and every 200 is for a request that cannot be read two ways,
// priced as an independent reading of it says (oracle below). extraName
// and extraValue are one more header of the call (a method override, a key
// header a client names, anything). The corpus in testdata/fuzz/FuzzAuthz
// holds one input per shape, per refusal and per ambiguous form.
func FuzzAuthz(f *testing.F) {
	f.Add("GET", "", "POST", "/v1/chat", "", "", "", "", "Bearer key-acme", "")
	f.Add("GET", "", "", "", "GET", "/v1/embeddings?x=1", "", "", "Bearer key-acme", "17")
	f.Add("POST", "/v1/completions/a", "", "", "", "", "X-Api-Key", "key-acme", "", "")
	f.Add("GET", "", "POST", "/v1/%ff", "POST", "/v1/chat", "", "", "bearer key-acme", "")
	f.Add("HEAD", "/../check", "", "", "", "", "", "", "Bearer key-acme", "")
	f.Add("GET", "/../../livez", "", "", "", "", "", "", "", "")
	f.Add("GET", "", "GET", "/x#/../admin/secret", "", "", "", "", "Bearer key-acme", "")
	f.Add("GET", "", "GET", "/v1/completions/a", "", "", "X-HTTP-Method-Override", "POST", "Bearer key-acme", "")
	f.Add("GET", "", "", "", "post", "/v1/completions/a", "", "", "Bearer key-acme", "")
	f.Fuzz(func(t *testing.T, method, suffix, om, ou, fm, fu, extraName, extraValue, auth, count string) {
		h := newHarnessWith(t, Config{ID: 1, Secret: testSecret, MaxReservations: 64, UsageHeadroom: 4,
			FundingWait: NoFundingWait}, 256)
		h.provisionSnap(routedWithDefault(t, "acme", route.URIRules{}), "key-acme", 1_000_000)
		h.drainOut()
		req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
		defer fasthttp.ReleaseRequest(req)
		if method != "" {
			req.Header.SetMethod(method)
		}
		req.SetRequestURI("/v1/authz" + suffix)
		for _, kv := range [...][2]string{{"X-Original-Method", om}, {"X-Original-URI", ou},
			{"X-Forwarded-Method", fm}, {"X-Forwarded-Uri", fu}, {"Authorization", auth}, {"X-Token-Count", count}} {
			if kv[1] != "" {
				req.Header.Set(kv[0], kv[1])
			}
		}
		if extraName != "" && extraValue != "" {
			req.Header.Set(extraName, extraValue)
		}
		h.s.Serve(&Request{Req: req, Resp: resp, Now: t0 + 1})
		st := resp.StatusCode()
		if !authzStatuses[st] {
			t.Fatalf("undocumented status %d: %q", st, resp.Body())
		}
		if st == 200 && forwardAuthURI(suffix) {
			// Only an admitted forward-auth call passes: a suffix that
			// resolves to another route (/livez) must not answer 200.
			if acct := resp.Header.Peek("X-Tollgate-Account"); string(acct) != "acme" || len(resp.Body()) != 0 {
				t.Fatalf("200 without the account (%q) or with a body: %q", acct, resp.Body())
			}
			checkAdmittedAsRead(t, req, resp)
			return
		}
		if st == 200 {
			return // another route's answer ("/v1/authz0/../../livez" is /livez's)
		}
		if ct := string(resp.Header.ContentType()); ct != "application/problem+json" {
			t.Fatalf("%d with content type %q", st, ct)
		}
		var p struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
		}
		if err := json.Unmarshal(resp.Body(), &p); err != nil || p.Status != st || p.Code == "" {
			t.Fatalf("%d: not a problem with a code: %q", st, resp.Body())
		}
		if h.s.usageReserved != 0 || h.s.acks.claimed != 0 {
			t.Fatalf("a refusal leaked %d usage slots, %d ack claims", h.s.usageReserved, h.s.acks.claimed)
		}
	})
}

// forwardAuthURI reports whether "/v1/authz"+suffix is a forward-auth call
// as sent (docs/API.md): /v1/authz itself, with a query or a path after
// it. Anything else ("/v1/authz0/../../livez") names another route.
func forwardAuthURI(suffix string) bool {
	return suffix == "" || suffix[0] == '/' || suffix[0] == '?'
}

// checkAdmittedAsRead is FuzzAuthz's oracle for an admitted call. It reads
// the original request as the shard received it, independently of
// route/uri.go (net/url and path.Clean), and fails unless the request is
// one that no service could read as another — no raw '#' or space, no
// path byte outside RFC 3986 (a query is visible ASCII, docs/API.md), no
// ';' or '\' in the path, no escaped separator, no segment
// ending in a dot or space, no lower-case method, no method override — and
// it was priced as that reading's route: POST /v1/chat 10 units,
// /v1/embeddings the count header or 100, POST /v1/completions/** held at
// 500 with a reservation, /admin/** never, anything else the default's 10.
func checkAdmittedAsRead(t *testing.T, req *fasthttp.Request, resp *fasthttp.Response) {
	t.Helper()
	method, target := string(req.Header.Peek("X-Original-Method")), string(req.Header.Peek("X-Original-URI"))
	if method == "" {
		method = string(req.Header.Peek("X-Forwarded-Method"))
	}
	if target == "" {
		target = string(req.Header.Peek("X-Forwarded-Uri"))
	}
	if raw := string(req.Header.RequestURI()); strings.HasPrefix(raw, "/v1/authz/") {
		method, target = string(req.Header.Method()), raw[len("/v1/authz"):]
	}
	fail := func(why string) {
		t.Helper()
		t.Fatalf("admitted %s %q: %s (answer %q)", method, target, why, resp.Header.String())
	}
	if strings.ToUpper(method) != method {
		fail("a lower-case method")
	}
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		if len(req.Header.Peek(h)) > 0 {
			fail("a method override header")
		}
	}
	rawPath, rawQuery, _ := strings.Cut(target, "?")
	if strings.ContainsAny(target, "# ") || strings.ContainsAny(rawPath, "\"<>[]^`{|};\\") {
		fail("a character some reader takes differently")
	}
	for _, c := range []byte(target) {
		if c < 0x21 || c > 0x7e {
			fail("a byte outside visible ASCII")
		}
	}
	lower := strings.ToLower(rawPath)
	for _, esc := range []string{"%2f", "%5c", "%2e", "%3b", "%3f", "%23", "%25"} {
		if strings.Contains(lower, esc) {
			fail("an escaped separator " + esc)
		}
	}
	if q, err := url.ParseQuery(strings.ReplaceAll(rawQuery, ";", "&")); err == nil {
		for k := range q {
			if strings.EqualFold(k, "_method") {
				fail("a _method parameter")
			}
		}
	}
	decoded, err := url.PathUnescape(rawPath)
	if err != nil {
		fail("a path that does not decode: " + err.Error())
	}
	for _, seg := range strings.Split(decoded, "/") {
		if seg != "." && seg != ".." && (strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ")) {
			fail("a segment ending in a dot or a space")
		}
	}
	p := path.Clean(decoded)
	units, reservation := string(resp.Header.Peek("X-Tollgate-Units")), string(resp.Header.Peek("X-Tollgate-Reservation"))
	want, capture := "10", false
	switch {
	case p == "/admin" || strings.HasPrefix(p, "/admin/"):
		fail("a denied route")
	case method == "POST" && p == "/v1/chat":
	case p == "/v1/embeddings":
		want = "100"
		if c := string(req.Header.Peek("X-Token-Count")); c != "" {
			n, _ := strconv.ParseUint(c, 10, 64)
			want = strconv.FormatUint(n, 10)
		}
	case method == "POST" && (p == "/v1/completions" || strings.HasPrefix(p, "/v1/completions/")):
		want, capture = "500", true
	}
	if units != want || (reservation != "") != capture || capture && len(reservation) != reservationLen {
		fail("priced " + units + " (reservation " + strconv.Quote(reservation) + "), but " + p + " costs " + want)
	}
}
