//go:build linux

package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestRolesOnARealDaemon: tokens of each role do what their role allows
// and are refused 403 forbidden, naming the permission, for the rest: a
// Prometheus scraper's metrics token reads /metrics and nothing else, a
// viewer reads everything and changes nothing, an operator runs accounts,
// budgets, deposits and keys but cannot close an account or make tokens.
// Every refusal is in the audit log under the token's id, and roles
// survive a restart.
func TestRolesOnARealDaemon(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, dir)
	p.provision("acme", 1000, 1)
	tokens := map[string]string{}
	ids := map[string]string{}
	for _, role := range []string{"operator", "viewer", "metrics"} {
		v := p.adminCall("POST", "/v1/admin-tokens", map[string]any{"name": role, "role": role}, http.StatusCreated)
		tokens[role], ids[role] = v["token"].(string), v["id"].(string)
	}
	type call struct {
		role, method, path, body string
		status                   int
		permission               string // what a 403 names
	}
	calls := []call{
		{"metrics", "GET", "/metrics", "", 200, ""},
		{"metrics", "GET", "/v1/accounts", "", 403, "read"},
		{"metrics", "GET", "/v1/whoami", "", 200, ""},
		{"viewer", "GET", "/v1/accounts/acme", "", 200, ""},
		{"viewer", "GET", "/v1/audit", "", 200, ""},
		{"viewer", "GET", "/metrics", "", 200, ""},
		{"viewer", "POST", "/v1/accounts", `{"id":"beta"}`, 403, "account.create"},
		{"viewer", "POST", "/v1/accounts/acme/keys", `{}`, 403, "key.create"},
		{"viewer", "GET", "/debug/pprof/cmdline", "", 403, "debug"},
		{"operator", "POST", "/v1/accounts", `{"id":"beta"}`, 201, ""},
		{"operator", "PUT", "/v1/accounts/beta/budget", `{"allowance":100,"period":"day"}`, 200, ""},
		{"operator", "POST", "/v1/accounts/beta/deposits", `{"units":5,"idempotency_key":"i"}`, 201, ""},
		{"operator", "POST", "/v1/accounts/beta/keys", `{}`, 201, ""},
		{"operator", "POST", "/v1/accounts/beta/status", `{"status":"suspended"}`, 200, ""},
		{"operator", "POST", "/v1/accounts/beta/status", `{"status":"closed"}`, 403, "account.close"},
		{"operator", "POST", "/v1/admin-tokens", `{"name":"me too","role":"admin"}`, 403, "admin_token.create"},
		{"operator", "POST", "/v1/platform-tokens", `{}`, 403, "platform_token.create"},
	}
	run := func(c call) {
		t.Helper()
		st, ct, body := httpCall(t, c.method, "http://"+p.adm+c.path, "Bearer "+tokens[c.role], []byte(c.body))
		if st != c.status {
			t.Fatalf("%s %s %s as %s: %d %s, want %d", c.method, c.path, c.body, c.role, st, body, c.status)
		}
		if c.status != 403 {
			return
		}
		var prob map[string]any
		json.Unmarshal(body, &prob)
		if ct != "application/problem+json" || prob["code"] != "forbidden" || prob["permission"] != c.permission ||
			!strings.Contains(prob["detail"].(string), c.permission) {
			t.Fatalf("%s %s as %s: %s %s, want forbidden naming %s", c.method, c.path, c.role, ct, body, c.permission)
		}
	}
	for _, c := range calls {
		run(c)
	}
	refused := map[string]int{}
	for _, item := range p.adminCall("GET", "/v1/audit?limit=1000", nil, http.StatusOK)["items"].([]any) {
		r := item.(map[string]any)
		if r["action"] == "request.forbidden" {
			refused[r["actor"].(string)]++
		}
	}
	if refused["admin/"+ids["metrics"]] != 1 || refused["admin/"+ids["viewer"]] != 3 || refused["admin/"+ids["operator"]] != 3 {
		t.Fatalf("refusals in the audit log by actor: %v (ids %v)", refused, ids)
	}
	if a := p.adminCall("GET", "/v1/accounts/beta", nil, http.StatusOK); a["status"] != "suspended" {
		t.Fatalf("the operator's refused close changed beta: %v", a)
	}
	p.stop()
	p = startProc(t, dir)
	for _, c := range calls {
		if c.status == 403 {
			run(c)
		}
	}
}
