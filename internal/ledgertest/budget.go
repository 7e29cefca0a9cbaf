package ledgertest

import (
	"sync"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// testBudgets: a budget starts the UTC period containing now and deposits
// one allowance; the same budget is a no-op; a new one expires the old
// allowance left.
func testBudgets(h *harness) {
	h.create("org", "", false)
	h.create("ws", "org", true)
	for _, c := range []struct {
		p          ledger.Period
		start, end int64
	}{
		{ledger.PeriodDay, dayStart, nextMidnight},
		{ledger.PeriodWeek, weekStart, nextMonday},
		{ledger.PeriodMonth, monthStart, nextMonth},
		{ledger.PeriodNone, 0, 0},
	} {
		a := h.budget("org", 0, c.p, t0)
		if a.PeriodStart != c.start || a.PeriodEnd != c.end {
			h.t.Fatalf("period %d: [%d, %d), want [%d, %d)", c.p, a.PeriodStart, a.PeriodEnd, c.start, c.end)
		}
	}
	h.budget("org", 100, ledger.PeriodDay, t0)
	h.money("org", money{Deposited: 100, AllowanceLeft: 100})
	h.budget("org", 100, ledger.PeriodDay, t0+hour) // the same: nothing happens
	h.money("org", money{Deposited: 100, AllowanceLeft: 100})
	l, _ := h.acquire("org", 30, 0, minute, t0) // the allowance pays first
	h.money("org", money{Deposited: 100, AllowanceLeft: 70, Outstanding: 30})
	a := h.budget("org", 40, ledger.PeriodDay, t0+hour)
	h.money("org", money{Deposited: 140, AllowanceLeft: 40, Outstanding: 30, Expired: 70})
	if a.Budget != (ledger.Budget{Allowance: 40, Period: ledger.PeriodDay}) || a.PeriodEnd != nextMidnight {
		h.t.Fatalf("budget %+v until %d", a.Budget, a.PeriodEnd)
	}
	l2, _ := h.acquire("org", 15, 0, minute, t0+hour)
	h.money("org", money{Deposited: 140, AllowanceLeft: 25, Outstanding: 45, Expired: 70})
	// The first lease's 30 came from the old budget's allowance. Returned in
	// the same period, it refills the new allowance only up to its 40.
	h.release(l, 30, t0+2*hour)
	h.money("org", money{Deposited: 140, AllowanceLeft: 40, Outstanding: 15, Expired: 85})
	h.release(l2, 15, t0+2*hour)
	h.money("org", money{Deposited: 140, AllowanceLeft: 40, Expired: 100})

	for _, b := range []ledger.Budget{{Allowance: 5}, {Allowance: 5, Period: 4}} {
		_, err := h.s.SetBudget(h.ctx, "org", b, t0)
		h.wantErr("invalid budget", err, ledger.ErrInvalid)
	}
	_, err := h.s.SetBudget(h.ctx, "ws", ledger.Budget{Allowance: 5, Period: ledger.PeriodDay}, t0)
	h.wantErr("budget of an unmetered account", err, ledger.ErrInvalid)
	_, err = h.s.SetBudget(h.ctx, "nobody", ledger.Budget{Allowance: 5, Period: ledger.PeriodDay}, t0)
	h.wantErr("budget of an unknown account", err, ledger.ErrNotFound)
	h.money("org", money{Deposited: 140, AllowanceLeft: 40, Expired: 100})
}

// testRollover: at each boundary exactly one allowance, no backlog, top-ups
// kept, at most limit accounts per call, nothing twice.
func testRollover(h *harness) {
	for _, id := range []core.AccountID{"daily", "weekly", "monthly", "flat"} {
		h.create(id, "", false)
	}
	h.budget("daily", 10, ledger.PeriodDay, t0)
	h.budget("weekly", 20, ledger.PeriodWeek, t0)
	h.budget("monthly", 30, ledger.PeriodMonth, t0)
	h.deposit("daily", 5, "top")
	h.deposit("flat", 5, "top")
	l, _ := h.acquire("daily", 4, 4, hour, t0)
	h.money("daily", money{Deposited: 15, AllowanceLeft: 6, TopUpLeft: 5, Outstanding: 4})

	rollover := func(now int64, limit, want int) {
		h.t.Helper()
		if n, err := h.s.Rollover(h.ctx, now, limit); n != want || err != nil {
			h.t.Fatalf("rollover at %d (limit %d): %d, %v; want %d", now, limit, n, err, want)
		}
	}
	_, err := h.s.Rollover(h.ctx, t0, 0)
	h.wantErr("limit 0", err, ledger.ErrInvalid)
	rollover(nextMidnight-1, 10, 0)
	rollover(nextMidnight, 10, 1)
	rollover(nextMidnight, 10, 0)
	rollover(nextMidnight+hour, 10, 0)
	h.money("daily", money{Deposited: 25, AllowanceLeft: 10, TopUpLeft: 5, Outstanding: 4, Expired: 6})
	a := h.account("daily")
	if a.PeriodStart != nextMidnight || a.PeriodEnd != nextMidnight+day {
		h.t.Fatalf("daily period [%d, %d)", a.PeriodStart, a.PeriodEnd)
	}
	// The lease's allowance belonged to yesterday: returned today, it expires.
	h.release(l, 4, nextMidnight+hour)
	h.money("daily", money{Deposited: 25, AllowanceLeft: 10, TopUpLeft: 5, Expired: 10})

	// Forty days on, every budget is due once: one allowance each, no backlog.
	later := t0 + 40*day // 19 April 2026, a Sunday
	rollover(later, 2, 2)
	rollover(later, 2, 1)
	rollover(later, 2, 0)
	h.money("daily", money{Deposited: 35, AllowanceLeft: 10, TopUpLeft: 5, Expired: 20})
	h.money("weekly", money{Deposited: 40, AllowanceLeft: 20, Expired: 20})
	h.money("monthly", money{Deposited: 60, AllowanceLeft: 30, Expired: 30})
	h.money("flat", money{Deposited: 5, TopUpLeft: 5})
	if a = h.account("weekly"); a.PeriodStart != at(2026, 4, 13, 0) || a.PeriodEnd != at(2026, 4, 20, 0) {
		h.t.Fatalf("weekly period [%d, %d)", a.PeriodStart, a.PeriodEnd)
	}
	if a = h.account("monthly"); a.PeriodStart != at(2026, 4, 1, 0) || a.PeriodEnd != at(2026, 5, 1, 0) {
		h.t.Fatalf("monthly period [%d, %d)", a.PeriodStart, a.PeriodEnd)
	}
}

// testRolloverIsLazyAtGrant: a grant after a boundary spends the new
// period's allowance even before Rollover runs, and the boundary is then
// not crossed a second time.
func testRolloverIsLazyAtGrant(h *harness) {
	h.create("org", "", false)
	h.budget("org", 10, ledger.PeriodDay, t0)
	h.acquire("org", 10, 10, hour, t0)
	h.money("org", money{Deposited: 10, Outstanding: 10})
	_, ev, err := h.s.Acquire(h.ctx, "org", "node-a", 5, 0, hour, t0+hour)
	h.refusal("exhausted today", err, ledger.RefusedExhausted, "org")
	if ev != (ledger.Evidence{Remaining: 10, ResetAt: nextMidnight, Next: 20, Scope: core.ScopeOrg, PeriodEnd: nextMidnight,
		Period: ledger.PeriodDay, Ceiling: 20}) {
		h.t.Fatalf("evidence %+v", ev)
	}
	l, ev := h.acquire("org", 5, 0, hour, nextMidnight+minute)
	if l.Granted != 5 || ev != (ledger.Evidence{Remaining: 20, ResetAt: nextMidnight + day, Next: 25, Scope: core.ScopeOrg,
		PeriodEnd: nextMidnight + day, Period: ledger.PeriodDay, Ceiling: 25}) {
		h.t.Fatalf("after midnight: %+v, %+v", l, ev)
	}
	h.money("org", money{Deposited: 20, AllowanceLeft: 5, Outstanding: 15})
	if n, err := h.s.Rollover(h.ctx, nextMidnight+hour, 10); n != 0 || err != nil {
		h.t.Fatalf("rollover after a lazy one: %d, %v", n, err)
	}
	h.money("org", money{Deposited: 20, AllowanceLeft: 5, Outstanding: 15})
}

// testConcurrentRolloverOnce: racing rollovers cross each boundary once.
func testConcurrentRolloverOnce(h *harness) {
	const accounts, callers = 12, 6
	for i := range accounts {
		id := core.AccountID("a" + string(rune('a'+i)))
		h.create(id, "", false)
		h.budget(id, 7, ledger.PeriodDay, t0)
	}
	// Every caller keeps rolling until nothing is due, first at the first
	// boundary, then at the next: each boundary must be crossed exactly
	// once per account however the calls interleave.
	for _, now := range []int64{nextMidnight, nextMidnight + day} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for range callers {
			wg.Go(func() {
				for {
					n, err := h.s.Rollover(h.ctx, now, 5)
					if err != nil {
						h.t.Errorf("rollover: %v", err)
						return
					}
					if n == 0 {
						return
					}
					mu.Lock()
					total += n
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if total != accounts {
			h.t.Fatalf("%d moves at %d for %d accounts", total, now, accounts)
		}
	}
	for i := range accounts {
		h.money(core.AccountID("a"+string(rune('a'+i))), money{Deposited: 21, AllowanceLeft: 7, Expired: 14})
	}
}

// testDeposits: idempotent by (account, key); conflicting repeats and bad
// arguments change nothing; overflow is an error that changes nothing.
func testDeposits(h *harness) {
	h.create("org", "", false)
	h.create("ws", "org", true)
	h.create("other", "", false)
	h.deposit("org", 100, "k1")
	a, dup, err := h.s.Deposit(h.ctx, "org", 100, "k1", t0+hour)
	if !dup || err != nil || a.TopUpLeft != 100 {
		h.t.Fatalf("repeat: dup %v, %v, %+v", dup, err, a)
	}
	_, _, err = h.s.Deposit(h.ctx, "org", 101, "k1", t0)
	h.wantErr("same key, other units", err, ledger.ErrConflict)
	h.deposit("other", 101, "k1") // keys are per account
	h.deposit("org", 5, "k2")
	for _, c := range []struct {
		id    core.AccountID
		units core.CostUnits
		key   string
		err   error
	}{
		{"org", 0, "k3", ledger.ErrInvalid},
		{"org", 1, "", ledger.ErrInvalid},
		{"ws", 1, "k3", ledger.ErrInvalid}, // unmetered: holds no money
		{"nobody", 1, "k3", ledger.ErrNotFound},
		{"org", core.MaxCostUnits, "k3", ledger.ErrOverflow},
	} {
		_, _, err = h.s.Deposit(h.ctx, c.id, c.units, c.key, t0)
		h.wantErr("deposit "+c.key+" to "+string(c.id), err, c.err)
	}
	h.money("org", money{Deposited: 105, TopUpLeft: 105})
	// The failed k3 left no trace: it can be used now.
	h.deposit("org", 1, "k3")
	h.money("org", money{Deposited: 106, TopUpLeft: 106})
	h.money("other", money{Deposited: 101, TopUpLeft: 101})
	// Top-ups survive rollovers.
	h.budget("org", 10, ledger.PeriodDay, t0)
	if n, err := h.s.Rollover(h.ctx, nextMidnight, 10); n != 1 || err != nil {
		h.t.Fatalf("rollover: %d, %v", n, err)
	}
	h.money("org", money{Deposited: 126, AllowanceLeft: 10, TopUpLeft: 106, Expired: 10})
}
