//go:build linux

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/agentadmission"
	"github.com/tollgated/tollgated/internal/await"
)

// forgeAgent is an agent runtime as Forge runs one (seed 000): the
// agentadmission middleware, configured like FORGE_* would, in front of a
// handler. Each is built fresh, so no answer comes from its 5 s cache.
type forgeAgent struct {
	checker *agentadmission.Checker
	log     *syncBuffer
}

func newForgeAgent(p *proc, token, org, workspace, agent string) forgeAgent {
	log := &syncBuffer{}
	c := agentadmission.New(agentadmission.Config{URL: "http://" + p.listen, Token: token, OrgID: org,
		WorkspaceID: workspace, AgentID: agent}, agentadmission.WithLogger(zerolog.New(log)),
		agentadmission.WithAuditSink(agentadmission.NewJSONSink(io.Discard)))
	return forgeAgent{checker: c, log: log}
}

// invoke sends one inbound request through the middleware and returns
// what the caller sees.
func (a forgeAgent) invoke(t *testing.T) (int, map[string]any) {
	t.Helper()
	srv := httptest.NewServer(a.checker.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"worked":true}`)
	})))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/tasks/send", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// decisions is what the platform decided for each case, as the agent
// runtime saw it: "admit", "admit (failed open)", or "deny reason scope".
func decisions(t *testing.T, p *proc, token string, cases []forgeCase) map[forgeCase]string {
	t.Helper()
	out := map[forgeCase]string{}
	for _, c := range cases {
		d := newForgeAgent(p, token, c.org, c.workspace, c.agent).checker.Check(context.Background(),
			agentadmission.Subject{})
		switch {
		case d.FailedOpen:
			out[c] = "admit (failed open)"
		case d.Denied:
			out[c] = "deny " + d.Reason + " " + d.Scope
		default:
			out[c] = "admit"
		}
	}
	return out
}

type forgeCase struct{ agent, org, workspace, want string }

// TestForgeAgentsAgainstARealTollgated drives the platform routes the way
// Forge agents do (seed 000: GET /v1/admission with the bearer platform
// token and the Org-Id / Workspace-Id headers), through the agent-side
// middleware, against a real daemon:
//   - an agent that is not provisioned is denied (unknown_agent), never
//     failed open;
//   - an org id and a workspace id are agent ids too, each decided over its
//     own chain (a spent workspace denies itself and its agents, not its
//     org);
//   - a revoked platform token is a 401: the agent fails open and logs its
//     warn line, and the platform counts the 401;
//   - after a restart on the same data dir, once ready, every decision is
//     the same, and the revoked token is still refused.
func TestForgeAgentsAgainstARealTollgated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	dir := t.TempDir()
	p := startProc(t, dir)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "acme-org"}, http.StatusCreated)
	p.adminCall("POST", "/v1/accounts/acme-org/deposits", map[string]any{"units": 1_000_000, "idempotency_key": "org"}, http.StatusCreated)
	for _, ws := range []string{"research", "support"} {
		p.adminCall("POST", "/v1/accounts", map[string]any{"id": ws, "parent": "acme-org"}, http.StatusCreated)
		p.adminCall("PUT", "/v1/accounts/"+ws+"/budget", map[string]any{"allowance": 500, "period": "day"}, http.StatusOK)
	}
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "agent-7", "parent": "research", "unmetered": true}, http.StatusCreated)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "agent-9", "parent": "support", "unmetered": true}, http.StatusCreated)
	tok := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)
	// Spend research's daily allowance: it and its agent are over budget.
	if m := p.postUsage(tok, "agent-7", 5, 100, "run"); m["accepted"] != 5.0 {
		t.Fatalf("usage: %v", m)
	}
	waitDecision(t, p, tok, "agent-7", "deny")
	// Re-sent, the batch bills nothing; a ghost's event is rejected. The
	// platform counts each event by what its reporter was told.
	p.postUsage(tok, "agent-7", 5, 100, "run")
	p.postUsage(tok, "ghost-agent", 1, 100, "ghost")
	for result, n := range map[string]float64{"accepted": 5, "duplicate": 5, "rejected": 1} {
		p.waitMetric(t, `tollgated_platform_usage_events_total{result="`+result+`"}`, n)
	}
	cases := []forgeCase{
		{"ghost-agent", "acme-org", "research", "deny unknown_agent agent"},
		{"agent-7", "acme-org", "research", "deny cost_limit_exceeded workspace"},
		{"agent-9", "acme-org", "support", "admit"},
		{"research", "acme-org", "", "deny cost_limit_exceeded workspace"},
		{"support", "acme-org", "support", "admit"},
		{"acme-org", "acme-org", "", "admit"},
		{"acme-org", "", "", "admit"}, // a self-hosted deploy sends no tenancy
	}
	check := func(t *testing.T, p *proc) {
		t.Helper()
		got := decisions(t, p, tok, cases)
		for _, c := range cases {
			if got[c] != c.want {
				t.Errorf("%s (Org-Id %q, Workspace-Id %q): %q, want %q", c.agent, c.org, c.workspace, got[c], c.want)
			}
		}
	}

	t.Run("unknown agent is denied, not failed open", func(t *testing.T) {
		a := newForgeAgent(p, tok, "acme-org", "research", "ghost-agent")
		status, body := a.invoke(t)
		if status != http.StatusPaymentRequired || body["reason"] != "unknown_agent" || body["scope"] != "agent" {
			t.Fatalf("caller saw %d %v", status, body)
		}
		if strings.Contains(a.log.String(), "admitting") {
			t.Fatalf("failed open: %s", a.log.String())
		}
	})
	t.Run("org and workspace ids are decided over their own chain", func(t *testing.T) {
		check(t, p)
		p.waitMetric(t, `tollgated_platform_admission_decisions_total{decision="deny",reason="unknown_agent"}`, 2)
	})
	var revoked string
	t.Run("revoked platform token fails open and is counted", func(t *testing.T) {
		extra := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)
		p.adminCall("DELETE", "/v1/platform-tokens/"+extra["id"].(string), nil, http.StatusOK)
		revoked = extra["token"].(string)
		before := p.metric(`tollgated_platform_unauthorized_total{route="admission"}`)
		a := newForgeAgent(p, revoked, "acme-org", "research", "agent-7")
		if status, body := a.invoke(t); status != http.StatusOK || body["worked"] != true {
			t.Fatalf("caller saw %d %v, want the fail-open admit", status, body)
		}
		var warn map[string]any
		json.Unmarshal([]byte(strings.TrimSpace(a.log.String())), &warn)
		if warn["level"] != "warn" || warn["message"] != "admission: call failed, admitting" ||
			warn["agent_id"] != "agent-7" || !strings.Contains(warn["error"].(string), "401") {
			t.Fatalf("warn line %q", a.log.String())
		}
		p.waitMetric(t, `tollgated_platform_unauthorized_total{route="admission"}`, before+1)
	})
	t.Run("decisions survive a restart", func(t *testing.T) {
		p.stop()
		p2 := startProc(t, dir)
		waitReady(t, p2)
		check(t, p2)
		// The revocation is in the ledger: the token stays refused.
		if revoked == "" {
			t.Fatal("the revoked-token case did not run")
		}
		a := newForgeAgent(p2, revoked, "acme-org", "research", "agent-7")
		if d := a.checker.Check(context.Background(), agentadmission.Subject{}); !d.FailedOpen || !strings.Contains(a.log.String(), "401") {
			t.Fatalf("a token revoked before the restart: %+v (%s), want a 401 the agent fails open on", d, a.log.String())
		}
		p2.waitMetric(t, `tollgated_platform_unauthorized_total{route="admission"}`, 1)
		p2.stop()
	})
}

// waitReady polls the data plane's /readyz until it answers 200 on 20
// fresh connections in a row: the kernel spreads connections over the
// shards, and each says ready only once it holds the ledger's state.
func waitReady(t *testing.T, p *proc) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var err error
	if !await.Poll(await.Default, func() bool {
		for range 20 {
			var resp *http.Response
			if resp, err = client.Get("http://" + p.listen + "/readyz"); err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("/readyz not answering 200 20 times in a row: %v", err)
	}
}

// waitDecision polls GET /v1/admission until agent's decision is want:
// post-paid usage reaches the admission answers once the ledger's
// evidence is republished, which runs after the usage is answered.
func waitDecision(t *testing.T, p *proc, token, agent, want string) {
	t.Helper()
	var body []byte
	if !await.Poll(await.Default, func() bool {
		_, _, body = httpCall(t, "GET", "http://"+p.listen+"/v1/admission?agent_id="+agent, "Bearer "+token, nil)
		var m map[string]any
		json.Unmarshal(body, &m)
		return m["decision"] == want
	}) {
		t.Fatalf("%s: %s, want %s", agent, body, want)
	}
}
