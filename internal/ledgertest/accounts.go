package ledgertest

import (
	"reflect"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// testHierarchy: scopes follow depth; parents must exist; agents have no
// children; roots are metered; ids are validated; creation is idempotent.
func testHierarchy(h *harness) {
	org, ws, agent := h.chain()
	for _, c := range []struct {
		a     ledger.Account
		scope core.Scope
	}{{org, core.ScopeOrg}, {ws, core.ScopeWorkspace}, {agent, core.ScopeAgent}} {
		if c.a.Scope != c.scope || c.a.Status != core.StatusActive || c.a.PolicyGeneration != 1 || c.a.NextToken != 1 ||
			moneyOf(c.a) != (money{}) || c.a.Budget != (ledger.Budget{}) || c.a.PeriodStart != 0 || c.a.PeriodEnd != 0 {
			h.t.Fatalf("new account %+v", c.a)
		}
	}
	_, _, err := h.s.CreateAccount(h.ctx, ledger.AccountSpec{ID: "sub", Parent: "agent"}, t0)
	h.wantErr("child of an agent", err, ledger.ErrInvalid)
	_, _, err = h.s.CreateAccount(h.ctx, ledger.AccountSpec{ID: "orphan", Parent: "nobody"}, t0)
	h.wantErr("unknown parent", err, ledger.ErrNotFound)
	_, _, err = h.s.CreateAccount(h.ctx, ledger.AccountSpec{ID: "free", Unmetered: true}, t0)
	h.wantErr("unmetered root", err, ledger.ErrInvalid)
	for _, bad := range []core.AccountID{"", "Upper", "-lead", "sp ace", core.AccountID(make([]byte, 65))} {
		_, _, err = h.s.CreateAccount(h.ctx, ledger.AccountSpec{ID: bad}, t0)
		h.wantErr("bad id "+string(bad), err, ledger.ErrInvalid)
	}

	again, created, err := h.s.CreateAccount(h.ctx, ledger.AccountSpec{ID: "ws", Parent: "org", Unmetered: true}, t0+hour)
	if err != nil || created || !reflect.DeepEqual(again, ws) {
		h.t.Fatalf("same spec again: created %v, %v, %+v", created, err, again)
	}
	for _, spec := range []ledger.AccountSpec{
		{ID: "ws", Parent: "org"},
		{ID: "ws", Parent: "org", Unmetered: true, Capacity: core.CapacityBestEffort},
		{ID: "ws"},
	} {
		_, _, err = h.s.CreateAccount(h.ctx, spec, t0)
		h.wantErr("different spec", err, ledger.ErrConflict)
	}
	_, err = h.s.Account(h.ctx, "nobody")
	h.wantErr("unknown account", err, ledger.ErrNotFound)

	all, err := h.s.Accounts(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []core.AccountID
	for _, a := range all {
		ids = append(ids, a.ID)
	}
	if !reflect.DeepEqual(ids, []core.AccountID{"agent", "org", "ws"}) {
		h.t.Fatalf("accounts %v, want agent, org, ws (id order)", ids)
	}
}

// testStatusAndPolicy: real changes bump the generation, repeats do not;
// closing is terminal and ends the budget; policies are stored verbatim.
func testStatusAndPolicy(h *harness) {
	h.create("org", "", false)
	h.budget("org", 100, ledger.PeriodDay, t0)
	h.deposit("org", 50, "d1")
	step := func(s core.Status, gen uint64) {
		h.t.Helper()
		a, err := h.s.SetStatus(h.ctx, "org", s)
		if err != nil || a.Status != s || a.PolicyGeneration != gen {
			h.t.Fatalf("status %s: %v, status %s, generation %d (want %d)", s, err, a.Status, a.PolicyGeneration, gen)
		}
	}
	step(core.StatusActive, 1)
	step(core.StatusSuspended, 2)
	step(core.StatusSuspended, 2)
	step(core.StatusActive, 3)
	_, err := h.s.SetStatus(h.ctx, "org", core.Status(7))
	h.wantErr("unknown status", err, ledger.ErrInvalid)
	_, err = h.s.SetStatus(h.ctx, "nobody", core.StatusSuspended)
	h.wantErr("unknown account", err, ledger.ErrNotFound)

	doc := []byte(`{"permissions":["read"]}`)
	a, err := h.s.SetPolicy(h.ctx, "org", doc)
	if err != nil || string(a.Policy) != string(doc) || a.PolicyGeneration != 4 {
		h.t.Fatalf("policy: %v, %q, generation %d", err, a.Policy, a.PolicyGeneration)
	}
	if a, _ = h.s.SetPolicy(h.ctx, "org", doc); a.PolicyGeneration != 4 {
		h.t.Fatalf("same policy bumped the generation to %d", a.PolicyGeneration)
	}
	if a, _ = h.s.SetPolicy(h.ctx, "org", []byte(`{}`)); a.PolicyGeneration != 5 || string(a.Policy) != `{}` {
		h.t.Fatalf("new policy: generation %d, %q", a.PolicyGeneration, a.Policy)
	}

	step(core.StatusClosed, 6)
	// Closing expired the allowance left and ended the budget; top-ups stay.
	h.money("org", money{Deposited: 150, AllowanceLeft: 0, TopUpLeft: 50, Expired: 100})
	if a = h.account("org"); a.Budget != (ledger.Budget{}) || a.PeriodEnd != 0 {
		h.t.Fatalf("closed account kept its budget: %+v until %d", a.Budget, a.PeriodEnd)
	}
	step(core.StatusClosed, 6)
	for _, s := range []core.Status{core.StatusActive, core.StatusSuspended} {
		_, err = h.s.SetStatus(h.ctx, "org", s)
		h.wantErr("reopen", err, ledger.ErrClosedAccount)
	}
	_, _, err = h.s.Deposit(h.ctx, "org", 5, "d2", t0)
	h.wantErr("deposit to a closed account", err, ledger.ErrClosedAccount)
	_, err = h.s.SetBudget(h.ctx, "org", ledger.Budget{Allowance: 5, Period: ledger.PeriodDay}, t0)
	h.wantErr("budget of a closed account", err, ledger.ErrClosedAccount)
	// A repeat of a deposit made before closing is still recognised.
	if _, dup, err := h.s.Deposit(h.ctx, "org", 50, "d1", t0); !dup || err != nil {
		h.t.Fatalf("repeat deposit after close: dup %v, %v", dup, err)
	}
	if n, err := h.s.Rollover(h.ctx, nextMonth, 10); n != 0 || err != nil {
		h.t.Fatalf("rollover of a closed account: %d, %v", n, err)
	}
	h.money("org", money{Deposited: 150, TopUpLeft: 50, Expired: 100})
}

// testChildren: Children lists an account's direct children in id order,
// nothing for a leaf, ErrNotFound for an unknown account; an idempotent
// re-create adds no second entry, and the lists survive a restart.
func testChildren(h *harness) {
	h.create("org", "", false)
	h.create("ws-b", "org", true)
	h.create("ws-a", "org", true)
	h.create("agent-2", "ws-a", false)
	h.create("agent-1", "ws-a", false)
	h.create("other", "", false)
	if _, created, err := h.s.CreateAccount(h.ctx, ledger.AccountSpec{ID: "ws-a", Parent: "org", Unmetered: true}, t0); created || err != nil {
		h.t.Fatalf("re-create: created %v, %v", created, err)
	}
	want := map[core.AccountID][]core.AccountID{
		"org": {"ws-a", "ws-b"}, "ws-a": {"agent-1", "agent-2"}, "ws-b": nil, "agent-1": nil, "other": nil,
	}
	for round := range 2 {
		for id, w := range want {
			got, err := h.s.Children(h.ctx, id)
			if err != nil || !reflect.DeepEqual(got, w) {
				h.t.Fatalf("round %d: children of %s = %v, %v; want %v", round, id, got, err, w)
			}
		}
		_, err := h.s.Children(h.ctx, "nobody")
		h.wantErr("children of an unknown account", err, ledger.ErrNotFound)
		h.restart()
	}
}
