package shard

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
)

const platformToken = "tgp_platform"

// agentHarness provisions agent "a1" under workspace "ws" under org "org",
// a platform token, and returns the agent's evidence cell.
func agentHarness(t testing.TB, threshold core.CostUnits) (*harness, *core.EvidenceCell) {
	t.Helper()
	h := newHarness(t, 0, 1024)
	h.provision("a1", "key-a1", 0)
	snap := testSnapshot("a1")
	snap.Generation = 2
	snap.Scope = core.ScopeAgent
	snap.Ancestors = []core.AccountID{"ws", "org"}
	snap.DenyThreshold = threshold
	cell := new(core.EvidenceCell)
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte(platformToken))
	for _, m := range []message.Inbound{
		{Kind: message.InInstall, Snap: snap},
		{Kind: message.InEvidence, Account: "a1", Evidence: cell},
		{Kind: message.InBindPlatform, Principal: d.Principal(), Digest: d},
	} {
		h.in.Push(m)
	}
	h.s.Poll(t0)
	return h, cell
}

func (h *harness) admission(query string, headers ...string) (int, map[string]any, []byte) {
	h.t.Helper()
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("GET")
	req.SetRequestURI("/v1/admission" + query)
	req.Header.Set("Authorization", "Bearer "+platformToken)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	h.s.Serve(&Request{Req: req, Resp: resp, Now: t0 + 1})
	var m map[string]any
	json.Unmarshal(resp.Body(), &m)
	return resp.StatusCode(), m, append([]byte(nil), resp.Body()...)
}

func TestAdmissionAdmitsWithExactlyFiveNullFields(t *testing.T) {
	h, cell := agentHarness(t, 0)
	cell.Store(core.FundingEvidence{Remaining: 500, Scope: core.ScopeAgent})
	status, _, body := h.admission("?agent_id=a1")
	if status != 200 || string(body) != `{"decision":"admit","reason":null,"scope":null,"window":null,"reset_at":null}` {
		t.Fatalf("admit = %d %s", status, body)
	}
}

func TestAdmissionDeniesWhenAScopeIsExhausted(t *testing.T) {
	h, cell := agentHarness(t, 0)
	end := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC).UnixNano()
	cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: end, Scope: core.ScopeWorkspace, Period: core.PeriodDay, PeriodEnd: end,
		Next: 1000, Ceiling: core.MaxCostUnits})
	status, m, body := h.admission("?agent_id=a1")
	if status != 200 || len(m) != 5 || m["decision"] != "deny" || m["reason"] != "cost_limit_exceeded" ||
		m["scope"] != "workspace" || m["window"] != "daily" || m["reset_at"] != "2026-12-03T00:00:00Z" {
		t.Fatalf("deny = %d %s", status, body)
	}
}

func TestAdmissionDeniesBelowTheThresholdWithNullResetWhenNoPeriod(t *testing.T) {
	h, cell := agentHarness(t, 100)
	cell.Store(core.FundingEvidence{Remaining: 99, Scope: core.ScopeOrg})
	_, m, body := h.admission("?agent_id=a1")
	if m["decision"] != "deny" || m["scope"] != "org" || m["window"] != "none" || m["reset_at"] != nil {
		t.Fatalf("below threshold = %s", body)
	}
	if _, present := m["reset_at"]; !present {
		t.Fatal("reset_at must be present (null), never absent")
	}
	cell.Store(core.FundingEvidence{Remaining: 100, Scope: core.ScopeOrg})
	if _, m, body := h.admission("?agent_id=a1"); m["decision"] != "admit" {
		t.Fatalf("at threshold = %s", body)
	}
}

func TestAdmissionIgnoresEvidenceOfAPastPeriod(t *testing.T) {
	h, cell := agentHarness(t, 0)
	cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: t0, Scope: core.ScopeAgent, Period: core.PeriodDay, PeriodEnd: t0,
		Next: 1000, Ceiling: core.MaxCostUnits})
	if _, m, body := h.admission("?agent_id=a1"); m["decision"] != "admit" {
		t.Fatalf("stale evidence still denies: %s", body)
	}
}

func TestAdmissionTenancy(t *testing.T) {
	h, _ := agentHarness(t, 0)
	for _, c := range []struct {
		headers []string
		want    string
		scope   string
	}{
		{nil, "admit", ""},
		{[]string{"Org-Id", "org", "Workspace-Id", "ws"}, "admit", ""},
		{[]string{"Org-Id", "org"}, "admit", ""},
		{[]string{"Org-Id", "other"}, "deny", "org"},
		{[]string{"Workspace-Id", "ws2", "Org-Id", "org"}, "deny", "workspace"},
	} {
		_, m, body := h.admission("?agent_id=a1", c.headers...)
		if m["decision"] != c.want || (c.scope != "" && (m["scope"] != c.scope || m["reason"] != "tenancy_mismatch")) {
			t.Errorf("headers %v: %s", c.headers, body)
		}
	}
}

func TestAdmissionSuspendedAgentIsDenied(t *testing.T) {
	h, _ := agentHarness(t, 0)
	snap := testSnapshot("a1")
	snap.Generation, snap.Status, snap.Scope = 3, core.StatusSuspended, core.ScopeAgent
	h.in.Push(message.Inbound{Kind: message.InInstall, Snap: snap})
	h.s.Poll(t0)
	if _, m, body := h.admission("?agent_id=a1"); m["decision"] != "deny" || m["reason"] != "account_suspended" || m["scope"] != "agent" {
		t.Fatalf("suspended = %s", body)
	}
}

func TestAdmissionErrors(t *testing.T) {
	h, _ := agentHarness(t, 0)
	if status, m, _ := h.admission(""); status != 400 || m["code"] != "invalid-query" || m["field"] != "agent_id" {
		t.Fatalf("no agent_id = %d %v", status, m)
	}
	// A valid customer key is not a platform token.
	status, _, _ := h.do("GET", "/v1/admission?agent_id=a1", "key-a1", "")
	if status != 401 {
		t.Fatalf("customer key on the platform route = %d", status)
	}
	if status, _, _ := h.do("GET", "/v1/admission?agent_id=a1", "nope", ""); status != 401 {
		t.Fatalf("bad token = %d", status)
	}
	if status, _, _ := h.do("POST", "/v1/admission?agent_id=a1", platformToken, ""); status != 405 {
		t.Fatalf("POST = %d", status)
	}
	// A platform token cannot admit work either.
	if status, _, _ := h.do("POST", "/v1/check", platformToken, chatBody); status != 401 {
		t.Fatalf("platform token on /v1/check = %d", status)
	}
}

func TestAdmissionAllocatesNothingWhenWarm(t *testing.T) {
	h, cell := agentHarness(t, 0)
	cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: t0 + 3600e9, Scope: core.ScopeWorkspace, Period: core.PeriodDay,
		PeriodEnd: t0 + 3600e9, Next: 1000, Ceiling: core.MaxCostUnits})
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("GET")
	req.SetRequestURI("/v1/admission?agent_id=a1")
	req.Header.Set("Authorization", "Bearer "+platformToken)
	req.Header.Set("Org-Id", "org")
	r := &Request{Req: req, Resp: resp, Now: t0 + 1}
	run := func() {
		h.s.Serve(r)
		if resp.StatusCode() != 200 {
			t.Fatalf("admission = %d %s", resp.StatusCode(), resp.Body())
		}
	}
	run()
	if a := testing.AllocsPerRun(1000, run); a != 0 {
		t.Fatalf("admission allocates %v per request", a)
	}
}

func BenchmarkAdmission(b *testing.B) {
	h, cell := agentHarness(b, 0)
	cell.Store(core.FundingEvidence{Remaining: 1000, Scope: core.ScopeAgent})
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("GET")
	req.SetRequestURI("/v1/admission?agent_id=a1")
	req.Header.Set("Authorization", "Bearer "+platformToken)
	r := &Request{Req: req, Resp: resp, Now: t0 + 1}
	b.ReportAllocs()
	for b.Loop() {
		h.s.Serve(r)
	}
}

func (h *harness) admissionAt(now int64, query string) (map[string]any, []byte) {
	h.t.Helper()
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("GET")
	req.SetRequestURI("/v1/admission" + query)
	req.Header.Set("Authorization", "Bearer "+platformToken)
	h.s.Serve(&Request{Req: req, Resp: resp, Now: now})
	var m map[string]any
	json.Unmarshal(resp.Body(), &m)
	return m, append([]byte(nil), resp.Body()...)
}

// TestAdmissionAgreesWithTheRolloverAtEveryBoundary: an agent's chain as
// the ledger keeps it — a workspace with a daily budget, an org with a
// monthly one — after debts, exhaustion and spending. At each of the next
// forty midnights the shard is asked just after the boundary, first with
// the evidence published before it (the ledger's maintenance has not
// rolled the budgets yet), then after the rollover is republished: both
// answers agree, so no admit window opens at a boundary. And the deny's
// reset_at is the first boundary at which the agent is admitted (null
// when it never is).
func TestAdmissionAgreesWithTheRolloverAtEveryBoundary(t *testing.T) {
	const day = int64(24 * time.Hour)
	start := time.Unix(0, t0).UTC()
	midnight := time.Date(start.Year(), start.Month(), start.Day()+1, 0, 0, 0, 0, time.UTC).UnixNano()
	monthEnd := time.Date(start.Year(), start.Month()+1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []struct {
		name      string
		threshold core.CostUnits
		wsDebt    core.CostUnits // beyond a spent workspace allowance of 100 a day
		orgSpent  bool           // the org's monthly allowance of 10000 is spent too
		admitted  int64          // the first boundary that admits; 0: none within forty days
	}{
		{"a debt of twenty days", 0, 2000, false, midnight + 20*day},
		{"a debt of half a day", 0, 50, false, midnight},
		{"workspace and org spent", 0, 0, true, monthEnd},
		{"a threshold the first reset does not reach", 80, 30, false, midnight + day},
		{"a threshold no reset reaches", 150, 0, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, cell := agentHarness(t, c.threshold)
			org := &ledger.Account{AccountSpec: ledger.AccountSpec{ID: "org"}, Scope: core.ScopeOrg, Status: core.StatusActive}
			ws := &ledger.Account{AccountSpec: ledger.AccountSpec{ID: "ws", Parent: "org"}, Scope: core.ScopeWorkspace, Status: core.StatusActive}
			spend := func(a *ledger.Account, b ledger.Budget, spent bool, debt core.CostUnits) {
				if _, err := ledger.ChangeBudget(a, b, t0); err != nil {
					t.Fatal(err)
				}
				if spent {
					a.Settled, a.AllowanceLeft, a.Overage = a.AllowanceLeft+debt, 0, debt
				}
			}
			spend(org, ledger.Budget{Allowance: 10_000, Period: ledger.PeriodMonth}, c.orgSpent, 0)
			spend(ws, ledger.Budget{Allowance: 100, Period: ledger.PeriodDay}, true, c.wsDebt)
			chain := []*ledger.Account{ws, org}
			publish := func() {
				ev, err := ledger.EvidenceOf(chain)
				if err != nil {
					t.Fatal(err)
				}
				cell.Store(ev)
			}
			publish()
			first, body := h.admissionAt(t0, "?agent_id=a1")
			if first["decision"] != "deny" {
				t.Fatalf("before any boundary: %s", body)
			}
			admitted := int64(0)
			for b := midnight; b < midnight+40*day; b += day {
				stale, staleBody := h.admissionAt(b+1e6, "?agent_id=a1")
				for _, a := range chain {
					if _, err := ledger.RollOver(a, b); err != nil {
						t.Fatal(err)
					}
				}
				publish()
				fresh, freshBody := h.admissionAt(b+1e6, "?agent_id=a1")
				if stale["decision"] != fresh["decision"] || stale["reset_at"] != fresh["reset_at"] {
					t.Fatalf("at %s: before the rollover was published %s, after %s", time.Unix(0, b).UTC(), staleBody, freshBody)
				}
				if fresh["decision"] == "admit" && admitted == 0 {
					admitted = b
				}
			}
			if admitted != c.admitted {
				t.Fatalf("first admitted at %d, want %d", admitted, c.admitted)
			}
			want := any(nil)
			if c.admitted != 0 {
				want = time.Unix(0, c.admitted).UTC().Format(time.RFC3339)
			}
			if first["reset_at"] != want {
				t.Fatalf("the first deny said reset_at %v, the agent was admitted at %v: %s", first["reset_at"], want, body)
			}
		})
	}
}
