//go:build linux

package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// utcMidnightAfter is the first 00:00 UTC after now, days further on.
func utcMidnightAfter(now time.Time, days int) time.Time {
	y, m, d := now.UTC().Date()
	return time.Date(y, m, d+1+days, 0, 0, 0, 0, time.UTC)
}

// sameUTCDay runs f until it ran within one UTC day (once, unless the
// test crossed midnight), and gives it the time it started at.
func sameUTCDay(t *testing.T, f func(now time.Time)) {
	t.Helper()
	for range 2 {
		now := time.Now().UTC()
		f(now)
		if time.Now().UTC().YearDay() == now.YearDay() {
			return
		}
	}
	t.Fatal("the test crossed midnight UTC twice")
}

// budgeted creates id (under parent, "" for a root) with a budget of
// allowance per period, and the policy every check here uses (a request
// costs 1).
func (p *proc) budgeted(id, parent string, allowance uint64, period string) {
	p.t.Helper()
	spec := map[string]any{"id": id}
	if parent != "" {
		spec["parent"] = parent
	}
	p.adminCall("POST", "/v1/accounts", spec, http.StatusCreated)
	p.adminCall("PUT", "/v1/accounts/"+id+"/budget", map[string]any{"allowance": allowance, "period": period}, http.StatusOK)
	p.adminCall("PUT", "/v1/accounts/"+id+"/policy", map[string]any{
		"permissions": []string{"chat"}, "operations": map[string]any{"requests": map[string]any{"weight": 1}},
		"limits": map[string]any{"max_items": 10},
	}, http.StatusOK)
}

// denial waits (for the report's evidence to reach every shard) for
// /v1/admission to deny agent as want says, and returns it.
func (p *proc) denial(tok, agent string, want func(map[string]any) bool) map[string]any {
	p.t.Helper()
	var m map[string]any
	var body string
	if !await.Poll(await.Default, func() bool {
		body = p.admission(tok, agent)
		m = nil
		json.Unmarshal([]byte(body), &m)
		return want(m)
	}) {
		p.t.Fatalf("admission of %s: %s", agent, body)
	}
	return m
}

// TestResetAtSaysWhenADebtIsRepaid: an agent that reports post-paid usage
// of twenty-one days' allowance owes twenty beyond today's: the denial and
// the 402 say it is admitted again at the twentieth midnight after the
// next one, when the allowances deposited by then exceed the debt (not
// "next midnight", when it would still owe nineteen), and Retry-After
// says as much. A debt no period's allowance can repay in any time the
// evidence names is reset_at null.
func TestResetAtSaysWhenADebtIsRepaid(t *testing.T) {
	p := startProc(t, t.TempDir())
	tok := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)
	p.budgeted("agent", "", 1000, "day")
	key := p.adminCall("POST", "/v1/accounts/agent/keys", nil, http.StatusCreated)["key"].(string)
	p.budgeted("sink", "", 1, "day")
	sameUTCDay(t, func(now time.Time) {
		p.postUsage(tok, "agent", 1, 21_000, "run-"+now.Format("0102"))
		want := utcMidnightAfter(now, 20).Format(time.RFC3339)
		d := p.denial(tok, "agent", func(m map[string]any) bool { return m["decision"] == "deny" })
		if d["reason"] != "cost_limit_exceeded" || d["scope"] != "org" || d["window"] != "daily" || d["reset_at"] != want {
			t.Fatalf("a debt of twenty days: %v, want reset_at %s", d, want)
		}
		st, body := checkOnce(t, p, key)
		var prob map[string]any
		json.Unmarshal([]byte(body), &prob)
		if st != http.StatusPaymentRequired || prob["code"] != "balance-exhausted" || prob["reset_at"] != want {
			t.Fatalf("check of the debtor: %d %s, want reset_at %s", st, body, want)
		}
		if ms, _ := prob["retry_after_ms"].(float64); ms < float64(20*24*time.Hour/time.Millisecond) {
			t.Fatalf("retry_after_ms %v is sooner than twenty days", prob["retry_after_ms"])
		}
	})
	// A debt beyond any reset the evidence names (more than ten thousand
	// periods of a 1-unit allowance).
	p.postUsage(tok, "sink", 1, 20_000, "sink")
	if d := p.denial(tok, "sink", func(m map[string]any) bool { return m["decision"] == "deny" }); d["reset_at"] != nil || d["window"] != "daily" {
		t.Fatalf("a debt no reset repays: %v", d)
	}
}

// TestResetAtIsTheLatestExhaustedScopes: a workspace with a daily budget
// and its org with a monthly one, both spent: the agent is admitted again
// only when both have reset, so the denial names the org, its monthly
// window and the first of next month (it used to name the workspace and
// the next midnight, although the org stays empty until then).
func TestResetAtIsTheLatestExhaustedScopes(t *testing.T) {
	p := startProc(t, t.TempDir())
	tok := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)
	p.budgeted("org", "", 100, "month")
	p.budgeted("ws", "org", 100, "day")
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "agent", "parent": "ws", "unmetered": true}, http.StatusCreated)
	sameUTCDay(t, func(now time.Time) {
		p.postUsage(tok, "agent", 1, 100, "spend-"+now.Format("0102"))
		y, m, _ := now.Date()
		monthEnd := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
		scope, window := "org", "monthly"
		if monthEnd.Equal(utcMidnightAfter(now, 0)) { // the last day of a month: both reset at midnight
			scope, window = "workspace", "daily"
		}
		d := p.denial(tok, "agent", func(m map[string]any) bool { return m["decision"] == "deny" })
		if d["scope"] != scope || d["window"] != window || d["reset_at"] != monthEnd.Format(time.RFC3339) {
			t.Fatalf("workspace and org spent: %v, want %s %s until %s", d, scope, window, monthEnd.Format(time.RFC3339))
		}
	})
	// A top-up of the org leaves the workspace the one to wait for.
	p.adminCall("POST", "/v1/accounts/org/deposits", map[string]any{"units": 1000, "idempotency_key": "top-up"}, http.StatusCreated)
	now := time.Now().UTC()
	d := p.denial(tok, "agent", func(m map[string]any) bool { return m["scope"] == "workspace" })
	if d["window"] != "daily" || d["reset_at"] != utcMidnightAfter(now, 0).Format(time.RFC3339) {
		t.Fatalf("the org topped up: %v", d)
	}
}
