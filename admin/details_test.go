package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestErrorDetailsSpeakTheAPIsWords: a refusal's detail names fields and
// values as the API does and never shows the code behind it — no Go
// struct, no package prefix (core:, ledger:, policy:) — and an unknown
// field of a policy is named with its whole path.
func TestErrorDetailsSpeakTheAPIsWords(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.createAccount(`{"id":"ws","parent":"acme","unmetered":true}`)
	for _, body := range []string{`{"units":9223372036854775807,"idempotency_key":"a"}`, `{"units":9223372036854775807,"idempotency_key":"b"}`} {
		h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/deposits", body)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		code, field, says  string
	}{
		{"POST", "/v1/accounts", `{"id":"acme","capacity":"best_effort"}`, 409, codeConflict, "",
			`account acme exists as parent null, capacity "assured", unmetered false`},
		{"POST", "/v1/accounts/acme/deposits", `{"units":9223372036854775807,"idempotency_key":"c"}`, 422, codeOverflow, "", "nothing changed"},
		{"POST", "/v1/accounts/acme/deposits", `{"units":5,"idempotency_key":"a"}`, 409, codeConflict, "", `deposit "a" of acme`},
		{"PUT", "/v1/accounts/acme/policy", `{"limits":{"max_items":1,"unit_brst":5}}`, 400, codeInvalidField, "limits.unit_brst", "unknown field"},
		{"PUT", "/v1/accounts/acme/policy", `{"operations":{"x":{"wieght":1}}}`, 400, codeInvalidField, "operations.x.wieght", "unknown field"},
		{"PUT", "/v1/accounts/ws/budget", `{"allowance":5,"period":"day"}`, 400, codeInvalidField, "", "ws is unmetered and holds no money"},
		{"POST", "/v1/accounts", `{"id":"Bad Id"}`, 400, codeInvalidField, "id", "account id must be 1-64 bytes"},
		{"GET", "/v1/accounts?parent=Bad", "", 400, codeInvalidQuery, "parent", "account id must be 1-64 bytes"},
		{"POST", "/v1/accounts/acme/status", `{"status":"closed"}`, 200, "", "", ""},
		{"POST", "/v1/accounts/acme/status", `{"status":"active"}`, 409, codeClosedAccount, "", "acme cannot become active (closed is final)"},
	} {
		status, hdr, b := h.call(c.method, c.path, c.body)
		if c.status == 200 {
			if status != 200 {
				t.Fatalf("%s %s: %d %s", c.method, c.path, status, b)
			}
			continue
		}
		p := h.checkProblem(status, hdr, b, c.status, c.code, c.method+" "+c.path+" "+c.body)
		if p.Field != c.field || !strings.Contains(p.Detail, c.says) {
			t.Errorf("%s %s %s: field %q detail %q, want field %q and %q", c.method, c.path, c.body, p.Field, p.Detail, c.field, c.says)
		}
		for _, internal := range []string{"{", "}", "core:", "ledger:", "policy:", "json:", "%!"} {
			if strings.Contains(p.Detail, internal) {
				t.Errorf("%s %s %s: the detail %q shows %q", c.method, c.path, c.body, p.Detail, internal)
			}
		}
	}
}
