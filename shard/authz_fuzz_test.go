package shard

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"
)

// authzStatuses are the statuses docs/API.md lists for /v1/authz (a
// call whose URI is not /v1/authz, /v1/authz?… or /v1/authz/… as sent,
// "/v1/authzx/../check" say, is another route's, and may be its 404/405).
var authzStatuses = map[int]bool{200: true, 400: true, 401: true, 402: true, 403: true, 404: true, 405: true,
	409: true, 413: true, 422: true, 429: true, 503: true}

// FuzzAuthz sends forward-auth calls with arbitrary descriptions of the
// original request through Shard.Serve: no input panics, every answer has a
// documented status, and every refusal is problem+json with its status and
// a code. The corpus in testdata/fuzz/FuzzAuthz holds one input per shape
// and per refusal of the route.
func FuzzAuthz(f *testing.F) {
	f.Add("GET", "", "POST", "/v1/chat", "", "", "", "", "Bearer key-acme", "")
	f.Add("GET", "", "", "", "GET", "/v1/embeddings?x=1", "", "", "Bearer key-acme", "17")
	f.Add("POST", "/v1/completions/a", "", "", "", "", "X-Api-Key", "key-acme", "", "")
	f.Add("GET", "", "POST", "/v1/%ff", "POST", "/v1/chat", "", "", "bearer key-acme", "")
	f.Add("HEAD", "/../check", "", "", "", "", "", "", "Bearer key-acme", "")
	f.Add("GET", "/../../livez", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, method, suffix, om, ou, fm, fu, keyHeader, key, auth, count string) {
		h := newHarnessWith(t, Config{ID: 1, Secret: testSecret, MaxReservations: 64, UsageHeadroom: 4,
			FundingWait: NoFundingWait}, 256)
		h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 1_000_000)
		req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
		defer fasthttp.ReleaseRequest(req)
		if method != "" {
			req.Header.SetMethod(method)
		}
		req.SetRequestURI("/v1/authz" + suffix)
		for _, kv := range [...][2]string{{"X-Original-Method", om}, {"X-Original-URI", ou},
			{"X-Forwarded-Method", fm}, {"X-Forwarded-Uri", fu}, {"X-Tollgate-Key-Header", keyHeader},
			{"Authorization", auth}, {"X-Token-Count", count}} {
			if kv[1] != "" {
				req.Header.Set(kv[0], kv[1])
			}
		}
		if keyHeader != "" && key != "" {
			req.Header.Set(keyHeader, key)
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
