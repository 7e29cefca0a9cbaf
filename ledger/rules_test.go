package ledger

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tollgated/tollgated/core"
)

// t0 is a Tuesday noon; its day, week and month all end later.
var t0 = utc(2026, 3, 10, 12, 0)

// money is an account's eight money terms, for exact comparisons.
type money struct {
	Deposited, Overage, AllowanceLeft, TopUpLeft, Outstanding, Settled, Loss, Expired core.CostUnits
}

func moneyOf(a *Account) money {
	return money{a.Deposited, a.Overage, a.AllowanceLeft, a.TopUpLeft, a.Outstanding, a.Settled, a.Loss, a.Expired}
}

func wantMoney(t *testing.T, a *Account, want money) {
	t.Helper()
	if got := moneyOf(a); got != want {
		t.Fatalf("%s money = %+v\nwant %+v", a.ID, got, want)
	}
	if err := a.Conserved(); err != nil {
		t.Fatal(err)
	}
}

// family returns an org (metered), a workspace (unmetered) and an agent
// (metered) under it: the agent's ancestry, leaf first.
func family(t *testing.T) (org, ws, agent *Account) {
	t.Helper()
	o, err := NewAccount(AccountSpec{ID: "org"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewAccount(AccountSpec{ID: "ws", Parent: "org", Unmetered: true}, &o)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAccount(AccountSpec{ID: "agent", Parent: "ws"}, &w)
	if err != nil {
		t.Fatal(err)
	}
	return &o, &w, &a
}

func TestNewAccountDerivesScopeAndValidates(t *testing.T) {
	org, ws, agent := family(t)
	if org.Scope != core.ScopeOrg || ws.Scope != core.ScopeWorkspace || agent.Scope != core.ScopeAgent {
		t.Fatalf("scopes %s %s %s", org.Scope, ws.Scope, agent.Scope)
	}
	if agent.Status != core.StatusActive || agent.PolicyGeneration != 1 || agent.NextToken != 1 || moneyOf(agent) != (money{}) {
		t.Fatalf("new account %+v", agent)
	}
	for _, c := range []struct {
		spec   AccountSpec
		parent *Account
	}{
		{AccountSpec{ID: "sub", Parent: "agent"}, agent},      // agents have no children
		{AccountSpec{ID: "Bad"}, nil},                         // upper case
		{AccountSpec{ID: "x", Parent: "-p"}, nil},             // bad parent id
		{AccountSpec{ID: "root", Unmetered: true}, nil},       // unmetered root
		{AccountSpec{ID: "self", Parent: "self"}, nil},        // own parent
		{AccountSpec{ID: "cap", Capacity: 7}, nil},            // unknown capacity
		{AccountSpec{ID: "w2", Parent: "org"}, nil},           // parent missing
		{AccountSpec{ID: "w3", Parent: "other"}, org},         // wrong parent
		{AccountSpec{ID: "w4"}, org},                          // root given a parent
		{AccountSpec{ID: "a", Parent: "ws", Capacity: 2}, ws}, // capacity again, with a parent
	} {
		if _, err := NewAccount(c.spec, c.parent); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewAccount(%+v): err = %v, want ErrInvalid", c.spec, err)
		}
	}
}

func TestChangeStatusBumpsGenerationAndClosingIsTerminal(t *testing.T) {
	org, _, _ := family(t)
	if _, err := ChangeBudget(org, Budget{Allowance: 100, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	if changed, err := ChangeStatus(org, core.StatusActive); changed || err != nil || org.PolicyGeneration != 1 {
		t.Fatalf("same status: changed %v, err %v, generation %d", changed, err, org.PolicyGeneration)
	}
	if changed, err := ChangeStatus(org, core.StatusSuspended); !changed || err != nil || org.PolicyGeneration != 2 {
		t.Fatalf("suspend: changed %v, err %v, generation %d", changed, err, org.PolicyGeneration)
	}
	if _, err := ChangeStatus(org, core.Status(3)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown status: %v", err)
	}
	if changed, err := ChangeStatus(org, core.StatusClosed); !changed || err != nil || org.PolicyGeneration != 3 {
		t.Fatalf("close: changed %v, err %v, generation %d", changed, err, org.PolicyGeneration)
	}
	// Closing ends the budget: the allowance left expires.
	wantMoney(t, org, money{Deposited: 100, Expired: 100})
	if org.Budget != (Budget{}) || org.PeriodStart != 0 || org.PeriodEnd != 0 {
		t.Fatalf("closed account keeps budget %+v [%d, %d)", org.Budget, org.PeriodStart, org.PeriodEnd)
	}
	if _, err := ChangeStatus(org, core.StatusActive); !errors.Is(err, ErrClosedAccount) || org.Status != core.StatusClosed {
		t.Fatalf("reopen: err %v, status %s", err, org.Status)
	}
	if changed, err := ChangeStatus(org, core.StatusClosed); changed || err != nil || org.PolicyGeneration != 3 {
		t.Fatalf("close again: changed %v, err %v", changed, err)
	}
	if err := TopUp(org, 5); !errors.Is(err, ErrClosedAccount) {
		t.Fatalf("top-up of a closed account: %v", err)
	}
	if _, err := ChangeBudget(org, Budget{Allowance: 1, Period: PeriodDay}, t0); !errors.Is(err, ErrClosedAccount) {
		t.Fatalf("budget of a closed account: %v", err)
	}
}

func TestChangePolicyIsVerbatimAndIdempotent(t *testing.T) {
	org, _, _ := family(t)
	doc := []byte(`{"limits":{"max_items":1}}`)
	if changed, err := ChangePolicy(org, doc); !changed || err != nil || org.PolicyGeneration != 2 || string(org.Policy) != string(doc) {
		t.Fatalf("policy: changed %v, err %v, generation %d, %q", changed, err, org.PolicyGeneration, org.Policy)
	}
	doc[0] = 'X' // the account keeps its own copy
	if org.Policy[0] != '{' {
		t.Fatal("policy aliases the caller's bytes")
	}
	if changed, _ := ChangePolicy(org, []byte(`{"limits":{"max_items":1}}`)); changed || org.PolicyGeneration != 2 {
		t.Fatalf("same policy bumped the generation to %d", org.PolicyGeneration)
	}
}

func TestChangeBudgetExpiresTheOldAllowanceAndDepositsOne(t *testing.T) {
	org, ws, _ := family(t)
	b := Budget{Allowance: 100, Period: PeriodWeek}
	if changed, err := ChangeBudget(org, b, t0); !changed || err != nil {
		t.Fatalf("set: %v %v", changed, err)
	}
	wantMoney(t, org, money{Deposited: 100, AllowanceLeft: 100})
	if org.PeriodStart != utc(2026, 3, 9, 0, 0) || org.PeriodEnd != utc(2026, 3, 16, 0, 0) {
		t.Fatalf("week period [%d, %d)", org.PeriodStart, org.PeriodEnd)
	}
	if changed, err := ChangeBudget(org, b, t0+1); changed || err != nil {
		t.Fatalf("same budget: %v %v", changed, err)
	}
	wantMoney(t, org, money{Deposited: 100, AllowanceLeft: 100})
	if _, err := ChangeBudget(org, Budget{Allowance: 30, Period: PeriodMonth}, t0); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 130, AllowanceLeft: 30, Expired: 100})
	if org.PeriodStart != utc(2026, 3, 1, 0, 0) || org.PeriodEnd != utc(2026, 4, 1, 0, 0) {
		t.Fatalf("month period [%d, %d)", org.PeriodStart, org.PeriodEnd)
	}
	if _, err := ChangeBudget(org, Budget{}, t0); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 130, Expired: 130})
	if org.PeriodStart != 0 || org.PeriodEnd != 0 {
		t.Fatalf("no period, yet [%d, %d)", org.PeriodStart, org.PeriodEnd)
	}
	for _, bad := range []Budget{{Allowance: 1}, {Period: 4}} {
		if _, err := ChangeBudget(org, bad, t0); !errors.Is(err, ErrInvalid) {
			t.Errorf("budget %+v: %v", bad, err)
		}
	}
	if _, err := ChangeBudget(ws, b, t0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("budget of an unmetered account: %v", err)
	}
}

func TestRollOverOncePerBoundaryWithoutBacklog(t *testing.T) {
	org, _, _ := family(t)
	if _, err := ChangeBudget(org, Budget{Allowance: 100, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	if err := TopUp(org, 7); err != nil {
		t.Fatal(err)
	}
	org.AllowanceLeft, org.Settled = 60, 40 // as if 40 were spent
	midnight := utc(2026, 3, 11, 0, 0)
	if moved, err := RollOver(org, midnight-1); moved || err != nil {
		t.Fatalf("before the boundary: %v %v", moved, err)
	}
	if moved, err := RollOver(org, midnight); !moved || err != nil {
		t.Fatalf("at the boundary: %v %v", moved, err)
	}
	wantMoney(t, org, money{Deposited: 207, AllowanceLeft: 100, TopUpLeft: 7, Settled: 40, Expired: 60})
	if moved, _ := RollOver(org, midnight+5); moved {
		t.Fatal("rolled over twice in one period")
	}
	// Ten days later: one allowance, not ten.
	later := utc(2026, 3, 21, 9, 0)
	if moved, err := RollOver(org, later); !moved || err != nil {
		t.Fatalf("ten days later: %v %v", moved, err)
	}
	wantMoney(t, org, money{Deposited: 307, AllowanceLeft: 100, TopUpLeft: 7, Settled: 40, Expired: 160})
	if org.PeriodStart != utc(2026, 3, 21, 0, 0) || org.PeriodEnd != utc(2026, 3, 22, 0, 0) {
		t.Fatalf("period [%d, %d)", org.PeriodStart, org.PeriodEnd)
	}
}

func TestOverflowChangesNothing(t *testing.T) {
	org, _, _ := family(t)
	if err := TopUp(org, core.MaxCostUnits-50); err != nil {
		t.Fatal(err)
	}
	before := *org
	if err := TopUp(org, 51); !errors.Is(err, ErrOverflow) || !reflect.DeepEqual(*org, before) {
		t.Fatalf("overflowing top-up: err %v, account %+v", err, org)
	}
	if _, err := ChangeBudget(org, Budget{Allowance: 51, Period: PeriodDay}, t0); !errors.Is(err, ErrOverflow) || !reflect.DeepEqual(*org, before) {
		t.Fatalf("overflowing budget: err %v, account %+v", err, org)
	}
	if _, err := ChangeBudget(org, Budget{Allowance: 50, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	before = *org
	if _, err := RollOver(org, t0+dayNs); !errors.Is(err, ErrOverflow) || !reflect.DeepEqual(*org, before) {
		t.Fatalf("overflowing rollover: err %v, account %+v", err, org)
	}
	if err := TopUp(org, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero top-up: %v", err)
	}
}

func TestAncestryChainAndInactive(t *testing.T) {
	org, ws, agent := family(t)
	an := Ancestry{agent, ws, org}
	if err := an.Validate(); err != nil {
		t.Fatal(err)
	}
	if c := an.Chain(); len(c) != 2 || c[0] != agent || c[1] != org {
		t.Fatalf("chain %v", c)
	}
	if an.Inactive() != nil {
		t.Fatal("all active, yet inactive")
	}
	ws.Status = core.StatusSuspended
	org.Status = core.StatusClosed
	if in := an.Inactive(); in != ws {
		t.Fatalf("inactive = %v, want the workspace (closest to the leaf)", in)
	}
	for _, bad := range []Ancestry{nil, {agent, org}, {agent, ws}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("ancestry %v: %v", bad, err)
		}
	}
}
