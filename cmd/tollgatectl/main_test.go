package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/internal/daemontest"
)

// ctl runs tollgatectl against a daemon, as a shell with
// TOLLGATE_ADMIN_URL and TOLLGATE_ADMIN_TOKEN set would.
type ctl struct {
	t   *testing.T
	env map[string]string
}

func newCtl(t *testing.T, d *daemontest.Daemon) *ctl {
	return &ctl{t: t, env: map[string]string{"TOLLGATE_ADMIN_URL": d.AdminURL(), "TOLLGATE_ADMIN_TOKEN": d.Token}}
}

// run returns the exit status, standard output and standard error.
func (c *ctl) run(args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, func(k string) string { return c.env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ok runs args and fails the test unless they succeed.
func (c *ctl) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run(args...)
	if code != 0 {
		c.t.Fatalf("tollgatectl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// json runs args with --json and decodes the output.
func (c *ctl) json(args ...string) map[string]any {
	c.t.Helper()
	out := c.ok(append(args, "--json")...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		c.t.Fatalf("tollgatectl %s --json: not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
	return m
}

func contains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: no %q in\n%s", what, w, out)
		}
	}
}

// check sends one /v1/check with key and returns its status and body.
func check(t *testing.T, d *daemontest.Daemon, key string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+d.Listen+"/v1/check",
		strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

const policyDoc = `{"permissions":["chat"],"operations":{"requests":{"weight":10}},
  "limits":{"max_items":1000,"request_rate":1000,"request_burst":1000}}`

// TestOperatingANodeEndToEnd drives every noun of tollgatectl against a
// real daemon, in tables and in JSON, and checks what the data plane then
// does.
func TestOperatingANodeEndToEnd(t *testing.T) {
	d := daemontest.Start(t, "")
	c := newCtl(t, d)

	contains(t, "accounts create", c.ok("accounts", "create", "acme"), "scope:", "org", "can spend:")
	c.ok("accounts", "create", "ws-1", "--parent", "acme")
	c.ok("accounts", "create", "agent-7", "--parent", "ws-1", "--unmetered")
	c.ok("budgets", "set", "acme", "--allowance", "100000", "--period", "day")
	dep := c.json("deposits", "create", "acme", "--units", "500", "--idempotency-key", "inv-1")
	if f, _ := dep["funds"].(map[string]any); f["received"] != 100500.0 || f["can_spend"] != 100500.0 {
		t.Fatalf("deposit: %v", dep)
	}
	file := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(file, []byte(policyDoc), 0o600)
	contains(t, "policy set", c.ok("accounts", "policy", "set", "acme", "--file", file), `"request_rate": 1000`)
	if p := c.json("accounts", "policy", "get", "acme"); p["generation"] == nil || p["default"] != false {
		t.Fatalf("policy get: %v", p)
	}
	if p := c.json("accounts", "policy", "get", "ws-1"); p["default"] != true {
		t.Fatalf("ws-1 has a policy of its own: %v", p)
	}

	key := c.json("keys", "create", "acme", "--name", "ci runner", "--expires-at", "720h")
	secret, _ := key["key"].(string)
	if !strings.HasPrefix(secret, "tgk_") || key["name"] != "ci runner" || key["expires_at"] == nil {
		t.Fatalf("keys create: %v", key)
	}
	status, answer := check(t, d, secret)
	if status != 200 || answer["units"] != 10.0 {
		t.Fatalf("check with the new key: %d %v", status, answer)
	}
	contains(t, "keys list", c.ok("keys", "list", "acme"), "NAME", "ci runner", "LAST USED")
	if strings.Contains(c.ok("keys", "list", "acme", "--json"), secret) {
		t.Fatal("keys list shows the secret")
	}
	rotated := c.json("keys", "rotate", "acme", key["id"].(string), "--grace", "0s")
	if rotated["rotated"].(map[string]any)["revoked"] != true {
		t.Fatalf("rotate with no grace left the old key live: %v", rotated)
	}
	if status, _ := check(t, d, secret); status != 401 {
		t.Fatalf("old key after rotation: %d", status)
	}
	newSecret := rotated["key"].(string)
	status, answer = check(t, d, newSecret)
	if status != 200 {
		t.Fatalf("rotated key: %d %v", status, answer)
	}

	tree := c.ok("accounts", "tree")
	contains(t, "accounts tree", tree, "acme (org)", "└─ ws-1 (workspace)", "   └─ agent-7 (agent)", "/ 100000 per day")
	contains(t, "accounts show", c.ok("accounts", "show", "acme"), "can spend:", "in leases (all nodes):", "period end:", "owed:")
	list := c.json("accounts", "list", "--limit", "1", "--all")
	if items := list["items"].([]any); len(items) != 3 || list["next_cursor"] != nil {
		t.Fatalf("accounts list --all: %v", list)
	}
	one := c.json("accounts", "list", "--limit", "1")
	if one["next_cursor"] == nil {
		t.Fatalf("a page of one of three has no next cursor: %v", one)
	}
	children := c.json("accounts", "list", "--parent", "acme")
	if items := children["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != "ws-1" {
		t.Fatalf("children of acme: %v", children)
	}

	// The usage event's id is the request_id the data plane answered; the
	// exporter bills in batches, so the last check may land a pass later.
	var usage map[string]any
	await.Poll(await.Default, func() bool {
		usage = c.json("usage", "acme")
		items := usage["items"].([]any)
		return len(items) > 0 && items[0].(map[string]any)["id"] == answer["request_id"]
	})
	if items := usage["items"].([]any); len(items) == 0 || items[0].(map[string]any)["id"] != answer["request_id"] {
		t.Fatalf("usage %v, want the last check's request_id %v first", usage, answer["request_id"])
	}
	contains(t, "usage", c.ok("usage", "acme"), "OCCURRED", "UNITS", answer["request_id"].(string))
	contains(t, "leases", c.ok("leases", "--active", "true"), "acme", "active")
	code, audit, auditErr := c.run("audit", "--all")
	if code != 0 || auditErr != "" {
		t.Fatalf("audit --all: exit %d, standard error %q (no hint to page on: it read every page)", code, auditErr)
	}
	contains(t, "audit", audit, "account.create", "account.policy", "key.rotate", "admin/bootstrap")
	if regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d`).MatchString(audit) ||
		!regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).MatchString(audit) {
		t.Fatalf("audit times are not RFC 3339 to the second:\n%s", audit)
	}
	if _, _, more := c.run("audit", "--limit", "1"); !strings.Contains(more, "more: --cursor") {
		t.Fatalf("one page of the audit log gives no cursor to go on: %q", more)
	}

	contains(t, "accounts status", c.ok("accounts", "status", "acme", "suspended"), "suspended")
	await.True(t, "a suspended account's key refused", func() bool {
		status, _ := check(t, d, newSecret)
		return status == 403
	})
	c.ok("keys", "revoke", "acme", rotated["id"].(string))

	pt := c.json("platform-tokens", "create")
	if !strings.HasPrefix(pt["token"].(string), "tgp_") {
		t.Fatalf("platform token %v", pt)
	}
	contains(t, "platform-tokens list", c.ok("platform-tokens", "list"), pt["id"].(string))
	contains(t, "platform-tokens revoke", c.ok("platform-tokens", "revoke", pt["id"].(string)), "yes")

	at := c.json("admin-tokens", "create", "--name", "ops on-call")
	contains(t, "admin-tokens list", c.ok("admin-tokens", "list"), "ops on-call", "bootstrap")
	// The new token works, from a file.
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(at["token"].(string)+"\n"), 0o600)
	other := &ctl{t: t, env: map[string]string{"TOLLGATE_ADMIN_URL": d.AdminURL()}}
	other.ok("--token-file", tokenFile, "accounts", "show", "acme")
	c.ok("admin-tokens", "revoke", at["id"].(string))
	if code, _, errOut := other.run("--token-file", tokenFile, "accounts", "show", "acme"); code != 1 || !strings.Contains(errOut, "401 unauthorized") {
		t.Fatalf("revoked admin token: exit %d %s", code, errOut)
	}
	d.Stop()
}

// TestErrorsAreClear: an API refusal prints its status, stable code and
// detail and exits 1; a command used wrongly exits 2; so does a bad URL.
func TestErrorsAreClear(t *testing.T) {
	d := daemontest.Start(t, "")
	c := newCtl(t, d)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"accounts", "show", "nobody"}, 1, "404 unknown-account (No such account)"},
		{[]string{"accounts", "create", "Bad Id"}, 1, "400 invalid-field"},
		{[]string{"accounts", "status", "nobody"}, 2, "accepts 2 arg(s)"},
		{[]string{"budgets", "set", "x", "--period", "day"}, 2, "allowance"},
		{[]string{"accounts", "lsit"}, 2, "unknown command"},
		{[]string{"--url", "ftp://x", "accounts", "list"}, 2, "admin URL"},
		{[]string{"--token", "tga_wrong", "accounts", "list"}, 1, "401 unauthorized"},
		{[]string{"keys", "create", "nobody", "--expires-at", "soon"}, 2, "--expires-at"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
	noToken := &ctl{t: t, env: map[string]string{"TOLLGATE_ADMIN_URL": d.AdminURL()}}
	if code, _, errOut := noToken.run("accounts", "list"); code != 1 || !strings.Contains(errOut, "TOLLGATE_ADMIN_TOKEN") {
		t.Errorf("no token: exit %d %q", code, errOut)
	}
	if code, out, _ := c.run("completion", "bash"); code != 0 || !strings.Contains(out, "bash completion") {
		t.Errorf("completion bash: exit %d", code)
	}
	if code, out, _ := noToken.run("health"); code != 0 || out != "healthy\n" {
		t.Errorf("health: exit %d %q", code, out)
	}
	down := &ctl{t: t, env: map[string]string{"TOLLGATE_ADMIN_URL": "http://127.0.0.1:1"}}
	if code, _, errOut := down.run("health"); code != 1 || !strings.Contains(errOut, "connection refused") {
		t.Errorf("health of nothing: exit %d %q", code, errOut)
	}
	if code, out, _ := c.run("version"); code != 0 || !strings.HasPrefix(out, "tollgatectl ") {
		t.Errorf("version: exit %d %q", code, out)
	}
	_, version, _ := c.run("version")
	if code, out, _ := noToken.run("--version"); code != 0 || out != version {
		t.Errorf("--version: exit %d %q, want %q", code, out, version)
	}
	for _, help := range [][]string{{"--help"}, {"keys", "create", "--help"}, {"admin-tokens", "create", "--help"}, {"accounts", "tree", "--help"}} {
		if code, out, _ := noToken.run(help...); code != 0 || !strings.Contains(out, "Examples:\n") || !strings.Contains(out, "\n  tollgatectl ") {
			t.Errorf("%v: exit %d, no examples in\n%s", help, code, out)
		}
	}
}

// TestTopShowsTrafficDenialsAndLatency: under a little load (admitted
// checks, and checks with an unknown key), top shows requests per second,
// the denial reason, and /v1/check's percentiles.
func TestTopShowsTrafficDenialsAndLatency(t *testing.T) {
	d := daemontest.Start(t, "")
	c := newCtl(t, d)
	c.ok("accounts", "create", "acme")
	c.ok("deposits", "create", "acme", "--units", "100000000", "--idempotency-key", "d")
	file := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(file, []byte(policyDoc), 0o600)
	c.ok("accounts", "policy", "set", "acme", "--file", file)
	key := c.json("keys", "create", "acme")["key"].(string)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range []string{key, "tgk_unknown"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A little load: a check every 2 ms at most.
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for n := 0; n < 20000; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				req, _ := http.NewRequest("POST", "http://"+d.Listen+"/v1/check",
					strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
				req.Header.Set("Authorization", "Bearer "+k)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	out := c.ok("top", "--interval", "500ms", "--frames", "2", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var f frame
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &f); err != nil || len(lines) != 2 {
		t.Fatalf("top --json: %d lines, %v\n%s", len(lines), err, out)
	}
	if f.RequestsPerSecond <= 0 || f.AdmittedPerSecond <= 0 || f.DenialsPerSecond["unknown-principal"] <= 0 || len(f.Shards) != 2 {
		t.Fatalf("top frame %+v", f)
	}
	var checkRoute *routeFrame
	for i := range f.Routes {
		if f.Routes[i].Route == "/v1/check" {
			checkRoute = &f.Routes[i]
		}
	}
	if checkRoute == nil || checkRoute.P99Seconds <= 0 || checkRoute.P50Seconds > checkRoute.P99Seconds {
		t.Fatalf("no /v1/check percentiles in %+v", f.Routes)
	}
	human := c.ok("top", "--interval", "300ms", "--frames", "1")
	contains(t, "top", human, "requests/s", "unknown-principal", "/v1/check", "P99", "SHARD")
}

// TestRolesTreeAndCompletion: a token made with --role viewer reads but
// cannot change anything — the refusal prints 403 forbidden, the permission
// it lacks and what to do, exit 1 — and whoami says so; accounts tree
// --json nests children under their parents; completion offers account
// ids, then an account's key ids, and token ids.
func TestRolesTreeAndCompletion(t *testing.T) {
	d := daemontest.Start(t, "")
	c := newCtl(t, d)
	c.ok("accounts", "create", "acme")
	c.ok("accounts", "create", "ws-1", "--parent", "acme")
	c.ok("accounts", "create", "agent-7", "--parent", "ws-1", "--unmetered")
	c.ok("accounts", "create", "beta")
	key := c.json("keys", "create", "acme", "--name", "ci")

	viewer := c.json("admin-tokens", "create", "--name", "grafana", "--role", "viewer")
	if viewer["role"] != "viewer" {
		t.Fatalf("admin-tokens create --role viewer: %v", viewer)
	}
	contains(t, "admin-tokens list", c.ok("admin-tokens", "list"), "ROLE", "grafana", "viewer", "bootstrap", "admin")
	v := &ctl{t: t, env: map[string]string{"TOLLGATE_ADMIN_URL": d.AdminURL(), "TOLLGATE_ADMIN_TOKEN": viewer["token"].(string)}}
	contains(t, "whoami", v.ok("whoami"), "role:", "viewer", `["read","metrics"]`)
	contains(t, "a viewer reads", v.ok("accounts", "show", "acme"), "can spend:")
	code, out, errOut := v.run("accounts", "create", "gamma")
	if code != 1 || out != "" || !strings.Contains(errOut, "403 forbidden") || !strings.Contains(errOut, "lacks the permission account.create") ||
		!strings.Contains(errOut, "tollgatectl whoami") {
		t.Fatalf("a viewer creating an account: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := c.run("admin-tokens", "create", "--name", "x", "--role", "root"); code != 1 || !strings.Contains(errOut, "[field role]") {
		t.Fatalf("an unknown role: exit %d %q", code, errOut)
	}

	tree := c.json("accounts", "tree")
	roots := tree["items"].([]any)
	acme := roots[0].(map[string]any)
	ws := acme["children"].([]any)[0].(map[string]any)
	agent := ws["children"].([]any)[0].(map[string]any)
	if len(roots) != 2 || acme["id"] != "acme" || ws["id"] != "ws-1" || agent["id"] != "agent-7" ||
		len(agent["children"].([]any)) != 0 || roots[1].(map[string]any)["id"] != "beta" || acme["funds"] == nil {
		t.Fatalf("accounts tree --json is not nested: %v", tree)
	}
	if sub := c.json("accounts", "tree", "ws-1"); len(sub["items"].([]any)) != 1 || sub["items"].([]any)[0].(map[string]any)["id"] != "ws-1" {
		t.Fatalf("accounts tree ws-1 --json: %v", sub)
	}

	complete := func(args ...string) []string {
		t.Helper()
		out := c.ok(append([]string{"__complete"}, args...)...)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ":") && l != "" {
				got = append(got, l)
			}
		}
		return got
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"accounts", "show", ""}, []string{"acme", "agent-7", "beta", "ws-1"}},
		{[]string{"accounts", "show", "a"}, []string{"acme", "agent-7"}},
		{[]string{"keys", "revoke", "acme", ""}, []string{key["id"].(string)}},
		{[]string{"usage", "b"}, []string{"beta"}},
		{[]string{"accounts", "create", "x", "--parent", "w"}, []string{"ws-1"}},
		{[]string{"accounts", "status", "acme", ""}, []string{"active", "suspended", "closed"}},
		{[]string{"admin-tokens", "revoke", "boot"}, []string{"bootstrap"}},
		{[]string{"admin-tokens", "create", "--role", ""}, []string{"admin", "operator", "viewer", "metrics"}},
	} {
		if got := complete(tc.args...); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("completing %q: %q, want %q", tc.args, got, tc.want)
		}
	}
}
