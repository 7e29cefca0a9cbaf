//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/agentadmission"
)

// postUsage reports post-paid usage for agent with a platform token.
func (p *proc) postUsage(token, agent string, n int, units uint64, idPrefix string) map[string]any {
	p.t.Helper()
	var events []map[string]any
	for i := range n {
		events = append(events, map[string]any{"id": fmt.Sprintf("%s-%d", idPrefix, i), "agent_id": agent,
			"units": units, "occurred_at": time.Now().UTC().Format(time.RFC3339Nano)})
	}
	b, _ := json.Marshal(map[string]any{"events": events})
	req, _ := http.NewRequest("POST", "http://"+p.listen+"/v1/usage", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		p.t.Fatalf("POST /v1/usage = %d %s", resp.StatusCode, raw)
	}
	var m map[string]any
	json.Unmarshal(raw, &m)
	return m
}

// TestAgentMiddlewareAgainstARealTollgated is seed 000 end to end: the Go
// agent middleware in front of a handler, a real tollgated behind it. The
// agent reports post-paid usage until its workspace's daily budget is
// spent; callers then get 402 naming the workspace scope, with a
// Retry-After that runs to the budget's reset (next UTC midnight); after a
// top-up and the middleware's 5 s cache window, they are admitted again.
func TestAgentMiddlewareAgainstARealTollgated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	p := startProc(t, t.TempDir())
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "acme-org"}, http.StatusCreated)
	p.adminCall("POST", "/v1/accounts/acme-org/deposits", map[string]any{"units": 1_000_000, "idempotency_key": "org"}, http.StatusCreated)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "research", "parent": "acme-org"}, http.StatusCreated)
	p.adminCall("PUT", "/v1/accounts/research/budget", map[string]any{"allowance": 500, "period": "day"}, http.StatusOK)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "agent-7", "parent": "research", "unmetered": true}, http.StatusCreated)
	tok := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)

	// The middleware's clock: its cache windows pass when the test moves
	// it on, not by waiting them out.
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	pastCacheWindow := func() { ahead.Add(int64(agentadmission.TTL + 100*time.Millisecond)) }
	checker := agentadmission.New(agentadmission.Config{URL: "http://" + p.listen, Token: tok,
		OrgID: "acme-org", WorkspaceID: "research", AgentID: "agent-7"}, agentadmission.WithLogger(zerolog.Nop()),
		agentadmission.WithAuditSink(agentadmission.NewJSONSink(io.Discard)), agentadmission.WithClock(clock))
	work := checker.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "worked")
	}))
	agent := httptest.NewServer(work)
	defer agent.Close()
	call := func() (*http.Response, string) {
		resp, err := http.Get(agent.URL + "/tasks/send")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := call(); resp.StatusCode != 200 || body != "worked" {
		t.Fatalf("funded agent: %d %s", resp.StatusCode, body)
	}

	// Spend the workspace's 500-unit daily allowance, and re-send one batch
	// to show reports are idempotent.
	if m := p.postUsage(tok, "agent-7", 5, 100, "run1"); m["accepted"] != 5.0 {
		t.Fatalf("usage batch: %v", m)
	}
	if m := p.postUsage(tok, "agent-7", 5, 100, "run1"); m["duplicate"] != 5.0 || m["accepted"] != 0.0 {
		t.Fatalf("re-sent batch: %v", m)
	}
	// The daemon denies first; then the middleware's cache of the earlier
	// admit runs out, and its next call asks the daemon.
	awaitAdmission(t, p, tok, "agent-7", `"decision":"deny"`)
	pastCacheWindow()
	resp, body := call()
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("spent workspace: %d %s", resp.StatusCode, body)
	}
	var deny map[string]any
	json.Unmarshal([]byte(body), &deny)
	midnight := clock().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if deny["error"] != "admission_denied" || deny["scope"] != "workspace" || deny["window"] != "daily" ||
		deny["reason"] != "cost_limit_exceeded" || deny["reset_at"] != midnight.Format(time.RFC3339) {
		t.Fatalf("deny body %s", body)
	}
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if want := int(midnight.Sub(clock()).Seconds()); err != nil || retry < want-2 || retry > want+2 {
		t.Fatalf("Retry-After %q, want about %d (to %s)", resp.Header.Get("Retry-After"), want, midnight)
	}

	// A top-up to the workspace funds it again once the cached deny
	// expires: the daemon admits at once, the middleware after its window.
	p.adminCall("POST", "/v1/accounts/research/deposits", map[string]any{"units": 1000, "idempotency_key": "top-up-1"}, http.StatusCreated)
	awaitAdmission(t, p, tok, "agent-7", `"decision":"admit"`)
	if resp, _ := call(); resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("inside the cache window the deny should still hold: %d", resp.StatusCode)
	}
	pastCacheWindow()
	if resp, body := call(); resp.StatusCode != 200 || body != "worked" {
		t.Fatalf("after top-up and cache window: %d %s", resp.StatusCode, body)
	}
	p.stop()
}
