//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// httpCall sends one request to a running daemon and returns the status,
// content type and body.
func httpCall(t testing.TB, method, url, auth string, body []byte) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v (did the daemon die?)", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), raw
}

// requireAlive fails t unless the daemon still runs and answers /livez.
func (p *proc) requireAlive(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		t.Fatalf("tollgated exited: %v", err)
	default:
	}
	if st, _, body := httpCall(t, "GET", "http://"+p.listen+"/livez", "", nil); st != 200 {
		t.Fatalf("/livez = %d %s", st, body)
	}
}

// waitMetric polls series until it reaches want (shards publish their
// counters once per loop tick).
func (p *proc) waitMetric(t *testing.T, series string, want float64) {
	t.Helper()
	await.True(t, fmt.Sprintf("%s ≥ %v", series, want), func() bool { return p.metric(series) >= want })
}

// hostile is one request that must be refused, and how.
type hostile struct {
	method, path, auth, body string
	status                   int
	code, field              string
}

// TestHostilePayloadsAreProblemsAndTheDaemonStaysUp sends every class of
// bad input of issue 11 to a real daemon over real sockets: each is a 4xx
// problem+json with a stable code naming the field, and the daemon answers
// /livez after every one. The first case is the curl, which killed
// the daemon.
func TestHostilePayloadsAreProblemsAndTheDaemonStaysUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	const key = "hostile-demo-key-0123456789"
	p := startProc(t, t.TempDir(), "--demo-key", key)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "org-h"}, http.StatusCreated)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "agent-h", "parent": "org-h"}, http.StatusCreated)
	tok := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)
	k, pt := "Bearer "+key, "Bearer "+tok
	event := func(fields ...string) string {
		return `{"events":[{` + strings.Join(fields, ",") + `}]}`
	}
	id, agent, units, at := `"id":"e1"`, `"agent_id":"agent-h"`, `"units":5`, `"occurred_at":"2026-12-02T17:00:00Z"`
	digits400 := strings.Repeat("9", 400)
	long := strings.Repeat("a", 300)
	line := func(op, count string) string { return `{"workload":[{"op":` + op + `,"count":` + count + `}]}` }
	bad := func(path, auth, body, field string) hostile {
		return hostile{"POST", path, auth, body, 400, "invalid-body", field}
	}

	classes := []struct {
		name  string
		cases []hostile
	}{
		{"issue curl: commit {} without a key", []hostile{bad("/v1/commit", "", `{}`, "reservation")}},
		{"finish and cancel {} without a key", []hostile{
			bad("/v1/finish", "", `{}`, "reservation"), bad("/v1/cancel", "", `{}`, "reservation")}},
		{"check and admit {} with a key", []hostile{
			bad("/v1/check", k, `{}`, "workload"), bad("/v1/admit", k, `{}`, "workload")}},
		{"workload line without op or count", []hostile{
			bad("/v1/check", k, `{"workload":[{"count":1}]}`, "workload[0].op"),
			bad("/v1/admit", k, `{"workload":[{"op":"requests","count":1},{"op":"requests"}]}`, "workload[1].count")}},
		{"usage {} and an event missing each field", []hostile{
			bad("/v1/usage", pt, `{}`, "events"),
			bad("/v1/usage", pt, event(agent, units, at), "events[0].id"),
			bad("/v1/usage", pt, event(id, units, at), "events[0].agent_id"),
			bad("/v1/usage", pt, event(id, agent, at), "events[0].units"),
			bad("/v1/usage", pt, event(id, agent, units), "events[0].occurred_at")}},
		{"null fields", []hostile{
			bad("/v1/commit", "", `{"reservation":null}`, "reservation"),
			bad("/v1/check", k, `{"workload":null}`, "workload"),
			bad("/v1/check", k, `{"permission":null,"workload":[]}`, "permission"),
			bad("/v1/check", k, line(`"requests"`, `null`), "workload[0].count"),
			bad("/v1/usage", pt, event(id, agent, `"units":null`, at), "events[0].units")}},
		{"wrong types", []hostile{
			bad("/v1/commit", "", `{"reservation":7}`, "reservation"),
			bad("/v1/check", k, `{"workload":{}}`, "workload"),
			bad("/v1/check", k, `{"workload":["requests"]}`, "workload[0]"),
			bad("/v1/check", k, line(`1`, `1`), "workload[0].op"),
			bad("/v1/check", k, line(`"requests"`, `"1"`), "workload[0].count"),
			bad("/v1/finish", "", `{"reservation":"00000000000000000000","units":true}`, "units"),
			bad("/v1/usage", pt, `{"events":{}}`, "events"),
			bad("/v1/usage", pt, event(id, `"agent_id":[]`, units, at), "events[0].agent_id")}},
		{"negative numbers", []hostile{
			bad("/v1/check", k, line(`"requests"`, `-1`), "workload[0].count"),
			bad("/v1/admit", k, `{"workload":[],"ttl_ms":-5}`, "ttl_ms"),
			bad("/v1/finish", "", `{"reservation":"00000000000000000000","units":-1}`, "units"),
			bad("/v1/usage", pt, event(id, agent, `"units":-5`, at), "events[0].units")}},
		{"numbers of 2^63 and above", []hostile{
			bad("/v1/check", k, line(`"requests"`, `9223372036854775808`), "workload[0].count"),
			bad("/v1/finish", "", `{"reservation":"00000000000000000000","units":18446744073709551615}`, "units"),
			bad("/v1/usage", pt, event(id, agent, `"units":18446744073709551616`, at), "events[0].units")}},
		{"floats and exponents", []hostile{
			bad("/v1/check", k, line(`"requests"`, `1.5`), "workload[0].count"),
			bad("/v1/check", k, line(`"requests"`, `2.0`), "workload[0].count"),
			bad("/v1/admit", k, `{"workload":[],"ttl_ms":1e3}`, "ttl_ms"),
			bad("/v1/usage", pt, event(id, agent, `"units":5.0`, at), "events[0].units")}},
		{"NaN strings and literals", []hostile{
			bad("/v1/check", k, line(`"requests"`, `"NaN"`), "workload[0].count"),
			bad("/v1/check", k, line(`"requests"`, `NaN`), "workload[0].count"),
			bad("/v1/finish", "", `{"reservation":"00000000000000000000","units":NaN}`, "units")}},
		{"400-digit numbers", []hostile{
			bad("/v1/check", k, line(`"requests"`, digits400), "workload[0].count"),
			bad("/v1/usage", pt, event(id, agent, `"units":`+digits400, at), "events[0].units")}},
		{"over-long strings", []hostile{
			bad("/v1/check", k, line(`"`+long+`"`, `1`), "workload[0].op"),
			bad("/v1/check", k, `{"permission":"`+long+`","workload":[]}`, "permission"),
			bad("/v1/commit", "", `{"reservation":"`+long+`"}`, "reservation"),
			bad("/v1/usage", pt, event(`"id":"`+long+`"`, agent, units, at), "events[0].id"),
			bad("/v1/usage", pt, event(id, `"agent_id":"`+long+`"`, units, at), "events[0].agent_id")}},
		{"strings that are not UTF-8 or hold control characters", []hostile{
			bad("/v1/check", k, line("\"re\xffquests\"", `1`), "workload[0].op"),
			bad("/v1/usage", pt, event("\"id\":\"e\xc3\"", agent, units, at), "events[0].id"),
			bad("/v1/usage", pt, event(`"id":"e\u0000"`, agent, units, at), "events[0].id")}},
		{"duplicate keys, top level and nested", []hostile{
			{"POST", "/v1/commit", "", `{"reservation":"00000000000000000000","reservation":"00000000000000000001"}`, 400, "duplicate-field", "reservation"},
			{"POST", "/v1/finish", "", `{"reservation":"00000000000000000000","units":1,"units":2}`, 400, "duplicate-field", "units"},
			{"POST", "/v1/check", k, `{"workload":[{"op":"requests","count":1,"count":100}]}`, 400, "duplicate-field", "workload[0].count"},
			{"POST", "/v1/check", k, `{"workload":[],"w\u006frkload":[]}`, 400, "duplicate-field", "workload"},
			{"POST", "/v1/usage", pt, event(id, agent, units, `"units":500`, at), 400, "duplicate-field", "events[0].units"}}},
		{"unknown fields", []hostile{
			{"POST", "/v1/finish", "", `{"reservation":"00000000000000000000","unit":5}`, 400, "unknown-field", "unit"},
			{"POST", "/v1/check", k, `{"workload":[{"op":"requests","count":1,"weight":0}]}`, 400, "unknown-field", "workload[0].weight"}}},
		{"bodies that are not one JSON object", []hostile{
			bad("/v1/commit", "", ``, ""), bad("/v1/commit", "", `{`, ""), bad("/v1/check", k, `[]`, ""),
			bad("/v1/check", k, `{} {}`, ""), bad("/v1/usage", pt, strings.Repeat("[", 5000), ""),
			bad("/v1/cancel", "", "\xff\xfe", "")}},
		{"bodies over the route's bound", []hostile{
			{"POST", "/v1/check", k, `{"workload":[]` + strings.Repeat(" ", 20<<10) + `}`, 413, "body-too-large", ""},
			{"POST", "/v1/commit", "", `{"reservation":"0"` + strings.Repeat(" ", 5<<10) + `}`, 413, "body-too-large", ""}}},
		{"admission queries", []hostile{
			{"GET", "/v1/admission", pt, ``, 400, "invalid-query", "agent_id"},
			{"GET", "/v1/admission?agent_id=agent-h&agent_id=org-h", pt, ``, 400, "duplicate-field", "agent_id"},
			{"GET", "/v1/admission?agent_id=%ff", pt, ``, 400, "invalid-query", "agent_id"},
			{"GET", "/v1/admission?agent_id=" + strings.Repeat("a", 65), pt, ``, 400, "invalid-query", "agent_id"}}},
	}
	for _, class := range classes {
		t.Run(class.name, func(t *testing.T) {
			for _, c := range class.cases {
				st, ct, raw := httpCall(t, c.method, "http://"+p.listen+c.path, c.auth, []byte(c.body))
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil || st != c.status || ct != "application/problem+json" ||
					m["code"] != c.code || m["status"] != float64(c.status) || (c.field != "" && m["field"] != c.field) {
					t.Errorf("%s %s %.80q: %d %s %s, want %d %s naming %q", c.method, c.path, c.body, st, ct, raw,
						c.status, c.code, c.field)
				}
				p.requireAlive(t)
			}
		})
	}
	// Nothing above reached a panic, recovered or not; the platform
	// counted the malformed calls.
	if n := p.metric("tollgated_internal_errors_total"); n != 0 {
		t.Fatalf("%v internal errors", n)
	}
	p.waitMetric(t, `tollgated_platform_bad_requests_total{route="usage"}`, 1)
	p.stop()
}
