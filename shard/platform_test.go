package shard

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

// TestAdmissionOfAnUnknownAgentIsADeny: an error status makes the agent
// fail open — run unbounded, its usage rejected, never billed — so an id
// that names no provisioned account is a decision, in the five fields.
func TestAdmissionOfAnUnknownAgentIsADeny(t *testing.T) {
	h, _ := platformHarness(t)
	for _, id := range []string{"nobody", "UPPER", "a%20b", "%E2%82%AC"} {
		status, _, body := h.admission("?agent_id=" + id)
		if status != 200 || string(body) != `{"decision":"deny","reason":"unknown_agent","scope":"agent","window":"none","reset_at":null}` {
			t.Errorf("%s: %d %s", id, status, body)
		}
	}
}

// TestAdmissionOfOrgAndWorkspaceIDs: any provisioned account is an
// agent_id (a one-level deployment asks about its org), answered over its
// own chain, with the scope that decided.
func TestAdmissionOfOrgAndWorkspaceIDs(t *testing.T) {
	h, cells := platformHarness(t)
	end := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []struct {
		query   string
		headers []string
		want    string
	}{
		{"?agent_id=org", nil, `{"decision":"admit","reason":null,"scope":null,"window":null,"reset_at":null}`},
		{"?agent_id=ws", []string{"Org-Id", "org"}, `{"decision":"admit","reason":null,"scope":null,"window":null,"reset_at":null}`},
		{"?agent_id=org", []string{"Org-Id", "org"}, `{"decision":"admit","reason":null,"scope":null,"window":null,"reset_at":null}`},
		{"?agent_id=ws", []string{"Workspace-Id", "ws"}, `{"decision":"admit","reason":null,"scope":null,"window":null,"reset_at":null}`},
		{"?agent_id=ws", []string{"Org-Id", "other"}, `{"decision":"deny","reason":"tenancy_mismatch","scope":"org","window":"none","reset_at":null}`},
		// An org is in no workspace.
		{"?agent_id=org", []string{"Workspace-Id", "ws"}, `{"decision":"deny","reason":"tenancy_mismatch","scope":"workspace","window":"none","reset_at":null}`},
	} {
		status, _, body := h.admission(c.query, c.headers...)
		if status != 200 || string(body) != c.want {
			t.Errorf("%s %v: %d %s", c.query, c.headers, status, body)
		}
	}
	cells["org"].Store(core.FundingEvidence{Remaining: 0, ResetAt: end, Scope: core.ScopeOrg, Period: core.PeriodDay, PeriodEnd: end,
		Next: 1000, Ceiling: core.MaxCostUnits})
	if _, _, body := h.admission("?agent_id=org"); string(body) != `{"decision":"deny","reason":"cost_limit_exceeded","scope":"org","window":"daily","reset_at":"2026-12-03T00:00:00Z"}` {
		t.Fatalf("spent org = %s", body)
	}
}

// TestAdmissionDeniesUnderAnInactiveAncestor: an agent's snapshot carries
// its chain's standing (the provisioner folds an ancestor's suspension or
// closure in, naming its scope), and the admission answer names that scope.
func TestAdmissionDeniesUnderAnInactiveAncestor(t *testing.T) {
	h, _ := platformHarness(t)
	set := func(id core.AccountID, scope core.Scope, st core.Status, from core.Scope, gen uint64, ancestors ...core.AccountID) {
		snap := testSnapshot(id)
		snap.Generation, snap.Status, snap.Scope, snap.StatusScope, snap.Ancestors = gen, st, scope, from, ancestors
		h.in.Push(message.Inbound{Kind: message.InInstall, Snap: snap})
		h.s.Poll(t0)
	}
	set("a1", core.ScopeAgent, core.StatusSuspended, core.ScopeWorkspace, 5, "ws", "org")
	if _, _, body := h.admission("?agent_id=a1"); string(body) != `{"decision":"deny","reason":"account_suspended","scope":"workspace","window":"none","reset_at":null}` {
		t.Fatalf("under a suspended workspace: %s", body)
	}
	set("a1", core.ScopeAgent, core.StatusClosed, core.ScopeOrg, 6, "ws", "org")
	set("ws", core.ScopeWorkspace, core.StatusClosed, core.ScopeOrg, 5, "org")
	set("org", core.ScopeOrg, core.StatusClosed, core.ScopeNone, 5)
	for _, id := range []string{"a1", "ws", "org"} {
		if _, _, body := h.admission("?agent_id=" + id); string(body) != `{"decision":"deny","reason":"account_closed","scope":"org","window":"none","reset_at":null}` {
			t.Fatalf("%s under a closed org: %s", id, body)
		}
	}
}

func TestAdmissionQueryRefusals(t *testing.T) {
	h, _ := platformHarness(t)
	for query, want := range map[string]string{
		"":                                      "invalid-query",
		"?agent_id=":                            "invalid-query",
		"?agent=a1":                             "invalid-query",
		"?agent_id=a1&agent_id=a1":              "duplicate-field",
		"?agent_id=a1&agent_id=":                "duplicate-field",
		"?agent_id=%ff":                         "invalid-query",
		"?agent_id=a%00":                        "invalid-query",
		"?agent_id=a%0Ab":                       "invalid-query",
		"?agent_id=x" + strings.Repeat("a", 64): "invalid-query",
	} {
		status, m, _ := h.admission(query)
		if status != 400 || m["code"] != want || m["field"] != "agent_id" {
			t.Errorf("%q: %d %v, want 400 %s", query, status, m, want)
		}
	}
	// Other parameters (a cache buster, a proxy's) are not the route's
	// business.
	if status, m, _ := h.admission("?cb=1&agent_id=a1&x=%ff"); status != 200 || m["decision"] != "admit" {
		t.Fatalf("with other parameters: %d %v", status, m)
	}
}

// TestPlatformAnswersAreCounted: what an operator alerts on when agents
// fail open — 401s, malformed calls — and every decision by reason.
func TestPlatformAnswersAreCounted(t *testing.T) {
	h, cells := platformHarness(t)
	// An account's cell holds the tightest scope of its chain.
	cells["a1"].Store(core.FundingEvidence{Remaining: 0, Scope: core.ScopeWorkspace})
	h.admission("?agent_id=a1")                                  // cost_limit_exceeded
	h.admission("?agent_id=org")                                 // admit
	h.admission("?agent_id=org")                                 // admit
	h.admission("?agent_id=nobody")                              // unknown_agent
	h.admission("?agent_id=org", "Org-Id", "x")                  // tenancy_mismatch
	h.admission("")                                              // 400
	h.do("POST", "/v1/admission?agent_id=a1", platformToken, "") // 405
	h.do("GET", "/v1/admission?agent_id=a1", "key-acme", "")     // 401
	h.do("GET", "/v1/admission?agent_id=a1", "", "")             // 401
	h.postUsage(`{}`, true)                                      // 400
	h.do("POST", "/v1/usage", "nope", `{}`)                      // 401

	// A batch of three: one for an unknown agent (rejected here), two the
	// plane bills: one accepted, one a duplicate. Then a batch that fails.
	batch := func(body string, answer func(*message.PostPaidBatch)) {
		h.postUsage(body, true)
		for _, m := range h.drainOut() {
			if m.Kind == message.OutPostPaid {
				answer(m.Batch)
				h.in.Push(message.Inbound{Kind: message.InPostPaidDone, Ticket: m.Ticket, Batch: m.Batch})
			}
		}
		h.s.Poll(t0 + 2)
	}
	ev := func(id, agent string) string {
		return `{"id":"` + id + `","agent_id":"` + agent + `","units":5,"occurred_at":"2026-12-02T17:00:00Z"}`
	}
	batch(`{"events":[`+ev("e1", "a1")+`,`+ev("e2", "ghost")+`,`+ev("e3", "ws")+`]}`, func(b *message.PostPaidBatch) {
		b.Accepted, b.Duplicate = 1, 1
	})
	batch(`{"events":[`+ev("e4", "a1")+`,`+ev("e5", "org")+`]}`, func(b *message.PostPaidBatch) { b.Failed = true })
	h.postUsage(`{"events":[`+ev("e6", "a1")+`]}`, false) // no way to wait: failed

	h.s.PublishStats()
	p := h.s.Stats().Platform
	want := PlatformStats{
		Unauthorized: [NumPlatformRoutes]uint64{routeAdmission: 2, routeUsage: 1},
		BadRequests:  [NumPlatformRoutes]uint64{routeAdmission: 2, routeUsage: 1},
		Usage:        [NumUsageResults]uint64{UsageAccepted: 1, UsageDuplicate: 1, UsageRejected: 1, UsageFailed: 3},
	}
	want.Decisions[AdmissionAdmit] = 2
	want.Decisions[AdmissionCostLimit] = 1
	want.Decisions[AdmissionUnknownAgent] = 1
	want.Decisions[AdmissionTenancyMismatch] = 1
	if p != want {
		t.Fatalf("platform stats\n got %+v\nwant %+v", p, want)
	}
	var sum PlatformStats
	sum.Add(&p)
	sum.Add(&p)
	if sum.Usage[UsageFailed] != 6 || sum.Decisions[AdmissionAdmit] != 4 || sum.Unauthorized[routeAdmission] != 4 {
		t.Fatalf("Add: %+v", sum)
	}
}

// TestRevokedPlatformTokenIsCountedUnauthorized: the revocation Forge
// agents fail open on shows in the counters.
func TestRevokedPlatformTokenIsCountedUnauthorized(t *testing.T) {
	h, _ := platformHarness(t)
	if status, _, _ := h.admission("?agent_id=a1"); status != 200 {
		t.Fatal("token not valid before revocation")
	}
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte(platformToken))
	h.in.Push(message.Inbound{Kind: message.InUnbindPlatform, Principal: d.Principal()})
	h.s.Poll(t0 + 1)
	if status, _, _ := h.admission("?agent_id=a1"); status != 401 {
		t.Fatalf("revoked token = %d", status)
	}
	h.s.PublishStats()
	if n := h.s.Stats().Platform.Unauthorized[routeAdmission]; n != 1 {
		t.Fatalf("%d 401s counted", n)
	}
}
