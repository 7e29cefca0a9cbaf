package ledger

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tollgated/tollgated/core"
)

func TestGrantSize(t *testing.T) {
	for _, c := range []struct{ limit, want, need, g core.CostUnits }{
		{0, 10, 0, 0},
		{1000, 100, 0, 100},  // plenty: want
		{200, 100, 0, 100},   // exactly 2*want: still want
		{199, 100, 0, 99},    // near exhaustion: half of what is left
		{150, 100, 120, 120}, // need fits: need
		{150, 100, 151, 150}, // need does not fit: all that is left, in one piece
		{150, 100, 150, 150}, // need is all that is left
		{1, 100, 0, 1},       // at least one unit
		{3, 2, 0, 1},
		{3, 2, 3, 3},
		{50, 10, 30, 30}, // need above want, within the balance
		{core.MaxCostUnits, core.MaxCostUnits, 0, core.MaxCostUnits / 2}, // 2*want overflows: near exhaustion
	} {
		if g := GrantSize(c.limit, c.want, c.need); g != c.g {
			t.Errorf("GrantSize(limit %d, want %d, need %d) = %d, want %d", c.limit, c.want, c.need, g, c.g)
		}
	}
}

func TestEvidenceIsTheTightestScopeClosestToTheLeaf(t *testing.T) {
	org, _, agent := family(t)
	org.TopUpLeft, org.Deposited = 500, 500
	agent.TopUpLeft, agent.Deposited = 300, 500
	agent.Outstanding = 200 // equal remaining: the tie goes to the agent, which never resets
	if _, err := ChangeBudget(org, Budget{Allowance: 10, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	org.Deposited, org.TopUpLeft = 500, 490 // the org's remaining stays 500
	ev, err := EvidenceOf([]*Account{agent, org})
	if err != nil {
		t.Fatal(err)
	}
	if ev != (Evidence{Remaining: 500, Next: 500, Scope: core.ScopeAgent, Ceiling: 500}) {
		t.Fatalf("tie: %+v", ev)
	}
	org.TopUpLeft = 489
	org.Deposited = 499
	if ev, _ = EvidenceOf([]*Account{agent, org}); ev != (Evidence{Remaining: 499, ResetAt: utc(2026, 3, 11, 0, 0), Next: 499,
		Scope: core.ScopeOrg, PeriodEnd: utc(2026, 3, 11, 0, 0), Period: PeriodDay, Ceiling: 499}) {
		t.Fatalf("org tighter: %+v", ev)
	}
	if _, err := EvidenceOf(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty chain: %v", err)
	}
}

func TestAcquireDebitsEveryFunderAllowanceFirst(t *testing.T) {
	org, ws, agent := family(t)
	if _, err := ChangeBudget(org, Budget{Allowance: 100, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*Account{org, agent} {
		if err := TopUp(a, 400); err != nil {
			t.Fatal(err)
		}
	}
	an := Ancestry{agent, ws, org}
	rec, ev, err := Acquire(an, 7, "node-a", 150, 0, 60e9, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := LeaseRecord{
		Lease: Lease{ID: 7, Account: "agent", Holder: "node-a", Token: 1, Granted: 150, State: LeaseActive, GrantedAt: t0, ExpiresAt: t0 + 60e9, Grace: NoGrace},
		Funding: []Funding{
			{Account: "agent", TopUp: 150},
			{Account: "org", Allowance: 100, TopUp: 50, PeriodStart: utc(2026, 3, 10, 0, 0)},
		},
	}
	if !reflect.DeepEqual(rec, want) {
		t.Fatalf("lease %+v\nwant %+v", rec, want)
	}
	wantMoney(t, agent, money{Deposited: 400, TopUpLeft: 250, Outstanding: 150})
	wantMoney(t, org, money{Deposited: 500, TopUpLeft: 350, Outstanding: 150})
	if agent.NextToken != 2 || ws.NextToken != 1 || org.NextToken != 1 {
		t.Fatalf("tokens: agent %d ws %d org %d", agent.NextToken, ws.NextToken, org.NextToken)
	}
	// Both hold 400 + 0 outstanding... the agent 250+150 = 400, the org 350+150 = 500.
	if ev != (Evidence{Remaining: 400, Next: 400, Scope: core.ScopeAgent, Ceiling: 400}) {
		t.Fatalf("evidence %+v", ev)
	}
	// Near exhaustion the agent (250 left) halves a request for 200.
	rec, _, err = Acquire(an, 8, "node-a", 200, 0, 60e9, t0)
	if err != nil || rec.Granted != 125 || rec.Token != 2 {
		t.Fatalf("second grant %+v, %v", rec, err)
	}
}

func TestAcquireForAnUnmeteredLeaf(t *testing.T) {
	org, ws, _ := family(t)
	if err := TopUp(org, 10); err != nil {
		t.Fatal(err)
	}
	rec, ev, err := Acquire(Ancestry{ws, org}, 1, "node-a", 4, 0, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Account != "ws" || rec.Token != 1 || ws.NextToken != 2 || len(rec.Funding) != 1 || rec.Funding[0].Account != "org" {
		t.Fatalf("lease %+v, ws next token %d", rec, ws.NextToken)
	}
	wantMoney(t, ws, money{})
	wantMoney(t, org, money{Deposited: 10, TopUpLeft: 6, Outstanding: 4})
	if ev != (Evidence{Remaining: 10, Next: 10, Scope: core.ScopeOrg, Ceiling: 10}) {
		t.Fatalf("evidence %+v", ev)
	}
}

func TestAcquireRefusalsChangeNothing(t *testing.T) {
	org, ws, agent := family(t)
	if err := TopUp(agent, 50); err != nil {
		t.Fatal(err)
	}
	if _, err := ChangeBudget(org, Budget{Allowance: 100, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	an := Ancestry{agent, ws, org}
	for _, c := range []struct {
		want core.CostUnits
		ttl  int64
		now  int64
	}{{0, 1, t0}, {1, 0, t0}, {1, -1, t0}, {1, 2, 1<<63 - 2}} {
		if _, _, err := Acquire(an, 1, "node-a", c.want, 0, c.ttl, c.now); !errors.Is(err, ErrInvalid) {
			t.Errorf("want %d ttl %d at %d: %v", c.want, c.ttl, c.now, err)
		}
	}
	before := []Account{*agent, *ws, *org}
	unchanged := func() {
		t.Helper()
		if !reflect.DeepEqual([]Account{*agent, *ws, *org}, before) {
			t.Fatalf("a refusal changed the accounts")
		}
	}

	ws.Status = core.StatusSuspended
	before[1] = *ws
	_, ev, err := Acquire(an, 1, "node-a", 10, 0, 1, t0)
	r, ok := errors.AsType[*Refusal](err)
	if !ok || r.Reason != RefusedInactive || r.Account != "ws" || r.Evidence != ev || ev.Remaining != 50 || ev.Scope != core.ScopeAgent {
		t.Fatalf("inactive workspace: %v (%+v)", err, ev)
	}
	unchanged()
	ws.Status = core.StatusActive
	before[1] = *ws

	// The org's allowance is spent; the agent still has 50.
	org.AllowanceLeft, org.Settled = 0, 100
	before[2] = *org
	_, ev, err = Acquire(an, 1, "node-a", 10, 0, 1, t0)
	if r, ok = errors.AsType[*Refusal](err); !ok || r.Reason != RefusedExhausted || r.Account != "org" {
		t.Fatalf("exhausted org: %v", err)
	}
	if ev != (Evidence{Remaining: 0, ResetAt: utc(2026, 3, 11, 0, 0), Next: 50, Scope: core.ScopeOrg, PeriodEnd: utc(2026, 3, 11, 0, 0),
		Period: PeriodDay, Ceiling: 50}) {
		t.Fatalf("evidence %+v", ev)
	}
	unchanged()
	// A refusal rolls nothing over for good, but its evidence does see the
	// new period: after midnight the org has a fresh allowance.
	rec, ev, err := Acquire(an, 1, "node-a", 10, 0, 1, utc(2026, 3, 11, 0, 0))
	if err != nil || rec.Granted != 10 || rec.Funding[1] != (Funding{Account: "org", Allowance: 10, PeriodStart: utc(2026, 3, 11, 0, 0)}) {
		t.Fatalf("after midnight: %+v, %v", rec, err)
	}
	wantMoney(t, org, money{Deposited: 200, AllowanceLeft: 90, Outstanding: 10, Settled: 100})
	if ev != (Evidence{Remaining: 50, Next: 50, Scope: core.ScopeAgent, Ceiling: 50}) {
		t.Fatalf("evidence %+v", ev)
	}
}

func TestExtendGrowsTheSameLease(t *testing.T) {
	org, ws, _ := family(t)
	if err := TopUp(org, 100); err != nil {
		t.Fatal(err)
	}
	an := Ancestry{ws, org}                                // the workspace is unmetered: only the org pays
	rec, _, err := Acquire(an, 1, "node-a", 30, 0, 10, t0) // 100 >= 60: all of it
	if err != nil || rec.Granted != 30 {
		t.Fatalf("first grant %+v %v", rec, err)
	}
	ev, err := Extend(&rec, an, 1, 60, 0, 20, t0+1) // 70 < 120: half of 70
	if err != nil || rec.Granted != 65 || rec.ExpiresAt != t0+21 || rec.Token != 1 || rec.Funding[0].TopUp != 65 {
		t.Fatalf("extended %+v, %v", rec, err)
	}
	wantMoney(t, org, money{Deposited: 100, TopUpLeft: 35, Outstanding: 65})
	if ev.Remaining != 100 {
		t.Fatalf("evidence %+v", ev)
	}
	// A fenced extension changes nothing.
	before := *org
	if _, err := Extend(&rec, an, 2, 10, 0, 10, t0+2); !errors.Is(err, ErrFenced) || rec.Granted != 65 || !reflect.DeepEqual(*org, before) {
		t.Fatalf("fenced: %v, %+v", err, rec)
	}
	// A suspended chain is refused and keeps the old expiry.
	org.Status = core.StatusSuspended
	_, err = Extend(&rec, an, 1, 10, 0, 10, t0+2)
	if r, ok := errors.AsType[*Refusal](err); !ok || r.Reason != RefusedInactive || r.Account != "org" || rec.ExpiresAt != t0+21 {
		t.Fatalf("refused: %v, %+v", err, rec)
	}
}

func TestExtendErrorChangesNothing(t *testing.T) {
	org, ws, _ := family(t)
	if err := TopUp(org, 100); err != nil {
		t.Fatal(err)
	}
	an := Ancestry{ws, org}
	rec, _, err := Acquire(an, 1, "node-a", 10, 0, 10, t0)
	if err != nil {
		t.Fatal(err)
	}
	saved, before := rec, []Account{*ws, *org}
	org.Outstanding = core.MaxCostUnits // the debit cannot be held
	before[1] = *org
	if _, err := Extend(&rec, an, 1, 10, 0, 10, t0); !errors.Is(err, ErrOverflow) {
		t.Fatalf("err %v", err)
	}
	if !reflect.DeepEqual(rec, saved) || !reflect.DeepEqual([]Account{*ws, *org}, before) {
		t.Fatalf("failed extension changed state: %+v", rec)
	}
}
