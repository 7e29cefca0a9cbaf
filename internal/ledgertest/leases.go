package ledgertest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// testGrantPolicy: want while plenty is left, half of what is left near
// exhaustion, need when it fits, never more than the balance.
func testGrantPolicy(h *harness) {
	for _, c := range []struct {
		balance, want, need, granted core.CostUnits
	}{
		{1000, 100, 0, 100},
		{200, 100, 0, 100},
		{150, 100, 0, 75},
		{150, 100, 120, 120},
		{150, 100, 151, 150}, // a need that does not fit takes what is left whole
		{1, 100, 0, 1},
		{3, 2, 3, 3},
		{50, 10, 30, 30},
	} {
		id := core.AccountID(fmt.Sprintf("b%d-w%d-n%d", c.balance, c.want, c.need))
		h.create(id, "", false)
		h.deposit(id, c.balance, "d")
		l, ev := h.acquire(id, c.want, c.need, minute, t0)
		want := ledger.Lease{ID: l.ID, Account: id, Holder: "node-a", Token: 1, Granted: c.granted, State: ledger.LeaseActive, GrantedAt: t0, ExpiresAt: t0 + minute,
			Grace: ledger.NoGrace} // "node-a" registered no incarnation
		if l != want {
			h.t.Fatalf("balance %d want %d need %d: lease %+v, want %+v", c.balance, c.want, c.need, l, want)
		}
		h.money(id, money{Deposited: c.balance, TopUpLeft: c.balance - c.granted, Outstanding: c.granted})
		if ev != (ledger.Evidence{Remaining: c.balance, Next: c.balance, Scope: core.ScopeOrg, Ceiling: c.balance}) {
			h.t.Fatalf("evidence %+v", ev)
		}
	}
	leases, err := h.s.Leases(h.ctx, false)
	if err != nil {
		h.t.Fatal(err)
	}
	for i := 1; i < len(leases); i++ {
		if leases[i].ID <= leases[i-1].ID {
			h.t.Fatalf("lease ids not unique and ordered: %d after %d", leases[i].ID, leases[i-1].ID)
		}
	}
}

// testFundingChain: every metered account from the leaf to the root pays
// every grant, allowance first; unmetered ones pay nothing; the evidence
// is the tightest scope, the leaf's on a tie.
func testFundingChain(h *harness) {
	h.chain()
	h.budget("org", 100, ledger.PeriodMonth, t0)
	h.deposit("org", 900, "o")
	h.deposit("agent", 300, "a")
	l, ev := h.acquire("agent", 120, 0, minute, t0)
	if l.Granted != 120 || l.Token != 1 || l.Account != "agent" {
		h.t.Fatalf("lease %+v", l)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 880, Outstanding: 120})
	h.money("ws", money{})
	h.money("agent", money{Deposited: 300, TopUpLeft: 180, Outstanding: 120})
	// Top-ups only, the agent holds at most what it has (its ceiling);
	// the org can hold a month's allowance besides its top-ups and leases.
	if ev != (ledger.Evidence{Remaining: 300, Next: 300, Scope: core.ScopeAgent, Ceiling: 300}) {
		h.t.Fatalf("evidence %+v", ev)
	}
	if got, err := h.s.Evidence(h.ctx, "agent"); err != nil || got != ev {
		h.t.Fatalf("Evidence(agent) = %+v, %v", got, err)
	}
	// The workspace has no money: its evidence is the org's.
	if got, err := h.s.Evidence(h.ctx, "ws"); err != nil || got != (ledger.Evidence{Remaining: 1000, ResetAt: nextMonth, Next: 1100,
		Scope: core.ScopeOrg, PeriodEnd: nextMonth, Period: ledger.PeriodMonth, Ceiling: 1100}) {
		h.t.Fatalf("Evidence(ws) = %+v, %v", got, err)
	}
	_, err := h.s.Evidence(h.ctx, "nobody")
	h.wantErr("evidence of an unknown account", err, ledger.ErrNotFound)
	// A grant to the workspace is paid by the org alone; the workspace's
	// own tokens count from 1.
	w, _ := h.acquire("ws", 50, 0, minute, t0)
	if w.Token != 1 || w.Granted != 50 {
		h.t.Fatalf("workspace lease %+v", w)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 830, Outstanding: 170})
	h.release(w, 50, t0)
	h.money("org", money{Deposited: 1000, TopUpLeft: 880, Outstanding: 120})
	// The agent can reach 180+120 = 300. Spend 700 of the org's directly so
	// that it, too, holds 180+120: on a tie the evidence names the scope
	// that resets last, the leaf (top-ups only: never).
	y, _ := h.acquire("org", 700, 700, minute, t0)
	h.ingest(t0, []ledger.Usage{leaseUsage(1, y, 700)}, ledger.Accepted)
	if got, _ := h.s.Evidence(h.ctx, "agent"); got != (ledger.Evidence{Remaining: 300, Next: 300, Scope: core.ScopeAgent, Ceiling: 300}) {
		h.t.Fatalf("tie: %+v", got)
	}
	// One more unit billed to the org alone makes it the tighter scope.
	h.ingest(t0, []ledger.Usage{{ID: eventID(2), Account: "org", Source: ledger.UsagePostPaid, Units: 1}}, ledger.Accepted)
	if got, _ := h.s.Evidence(h.ctx, "agent"); got != (ledger.Evidence{Remaining: 299, ResetAt: nextMonth, Next: 300, Scope: core.ScopeOrg,
		PeriodEnd: nextMonth, Period: ledger.PeriodMonth, Ceiling: 300}) {
		h.t.Fatalf("org tighter: %+v", got)
	}
}

// testRefusals: bad arguments are errors; inactive and exhausted scopes
// are refusals naming the scope closest to the leaf; refusals change
// nothing and carry the evidence.
func testRefusals(h *harness) {
	h.create("org", "", false)
	h.create("ws", "org", false)
	h.create("agent", "ws", false)
	h.deposit("org", 100, "o")
	h.deposit("ws", 100, "w")
	for _, c := range []struct {
		want     core.CostUnits
		ttl, now int64
	}{{0, minute, t0}, {1, 0, t0}, {1, -1, t0}, {1, 10, 1<<63 - 5}} {
		_, _, err := h.s.Acquire(h.ctx, "agent", "node-a", c.want, 0, c.ttl, c.now)
		h.wantErr("bad arguments", err, ledger.ErrInvalid)
	}
	_, _, err := h.s.Acquire(h.ctx, "nobody", "node-a", 1, 0, minute, t0)
	h.wantErr("unknown account", err, ledger.ErrNotFound)

	_, ev, err := h.s.Acquire(h.ctx, "agent", "node-a", 10, 0, minute, t0)
	r := h.refusal("agent has nothing", err, ledger.RefusedExhausted, "agent")
	if ev != (ledger.Evidence{Scope: core.ScopeAgent}) || r.Evidence != ev {
		h.t.Fatalf("evidence %+v / %+v", ev, r.Evidence)
	}
	h.deposit("agent", 100, "a")
	if _, err := h.s.SetStatus(h.ctx, "ws", core.StatusSuspended); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.s.SetStatus(h.ctx, "org", core.StatusSuspended); err != nil {
		h.t.Fatal(err)
	}
	_, ev, err = h.s.Acquire(h.ctx, "agent", "node-a", 10, 0, minute, t0)
	h.refusal("suspended workspace", err, ledger.RefusedInactive, "ws")
	if ev != (ledger.Evidence{Remaining: 100, Next: 100, Scope: core.ScopeAgent, Ceiling: 100}) {
		h.t.Fatalf("evidence %+v", ev)
	}
	if _, err := h.s.SetStatus(h.ctx, "ws", core.StatusActive); err != nil {
		h.t.Fatal(err)
	}
	_, _, err = h.s.Acquire(h.ctx, "agent", "node-a", 10, 0, minute, t0)
	h.refusal("suspended org", err, ledger.RefusedInactive, "org")
	if _, err := h.s.SetStatus(h.ctx, "org", core.StatusActive); err != nil {
		h.t.Fatal(err)
	}
	// Exhaust the org: the refusal names it, though the leaf has money.
	o, _ := h.acquire("org", 100, 100, minute, t0)
	_, ev, err = h.s.Acquire(h.ctx, "agent", "node-a", 10, 0, minute, t0)
	h.refusal("exhausted org", err, ledger.RefusedExhausted, "org")
	if ev != (ledger.Evidence{Remaining: 100, Next: 100, Scope: core.ScopeAgent, Ceiling: 100}) {
		h.t.Fatalf("evidence %+v", ev)
	}
	h.money("agent", money{Deposited: 100, TopUpLeft: 100})
	h.money("ws", money{Deposited: 100, TopUpLeft: 100})
	h.money("org", money{Deposited: 100, Outstanding: 100})
	if a := h.account("agent"); a.NextToken != 1 {
		h.t.Fatalf("refusals consumed tokens: next %d", a.NextToken)
	}
	h.release(o, 100, t0)
	l, _ := h.acquire("agent", 10, 0, minute, t0)
	if l.Token != 1 {
		h.t.Fatalf("first grant after refusals has token %d", l.Token)
	}
}

// testRelease: credits unspent (allowance part first, into the lease's
// period only), the gap becomes loss; fencing, double release and bad
// amounts change nothing.
func testRelease(h *harness) {
	h.create("org", "", false)
	h.budget("org", 100, ledger.PeriodDay, t0)
	h.deposit("org", 400, "o")
	l, _ := h.acquire("org", 300, 300, hour, t0) // 100 allowance + 200 top-up
	h.money("org", money{Deposited: 500, TopUpLeft: 200, Outstanding: 300})
	h.ingest(t0, []ledger.Usage{leaseUsage(1, l, 30)}, ledger.Accepted)
	h.money("org", money{Deposited: 500, TopUpLeft: 200, Outstanding: 270, Settled: 30})

	err := h.s.Release(h.ctx, l.ID, l.Token+1, 0, t0)
	h.wantErr("wrong token", err, ledger.ErrFenced)
	err = h.s.Release(h.ctx, l.ID, l.Token, 271, t0)
	h.wantErr("more than is left", err, ledger.ErrInvalid)
	err = h.s.Release(h.ctx, l.ID+100, l.Token, 0, t0)
	h.wantErr("unknown lease", err, ledger.ErrNotFound)
	if got := h.lease(l.ID); got.State != ledger.LeaseActive || got.Used != 30 {
		h.t.Fatalf("refused releases changed the lease: %+v", got)
	}
	h.money("org", money{Deposited: 500, TopUpLeft: 200, Outstanding: 270, Settled: 30})

	// Usage counts against the allowance part first: 70 of it is left.
	h.release(l, 250, t0+minute)
	h.money("org", money{Deposited: 500, AllowanceLeft: 70, TopUpLeft: 380, Settled: 30, Loss: 20})
	want := l
	want.Used, want.Credited, want.State = 30, 250, ledger.LeaseReleased
	if got := h.lease(l.ID); got != want {
		h.t.Fatalf("released lease %+v, want %+v", got, want)
	}
	err = h.s.Release(h.ctx, l.ID, l.Token, 0, t0)
	h.wantErr("second release", err, ledger.ErrLeaseNotActive)

	// After the period, a lease's allowance part expires when returned.
	m, _ := h.acquire("org", 100, 100, hour, t0+minute) // 70 allowance + 30 top-up
	h.release(m, 100, nextMidnight)
	// Rolled over first (+100, the old 0 left expired), then 70 expired.
	h.money("org", money{Deposited: 600, AllowanceLeft: 100, TopUpLeft: 380, Settled: 30, Loss: 20, Expired: 70})
}

// testExtend: a lease grows and lives on under one token; an exhausted
// chain extends time only; fenced, ended, suspended and period-crossing
// extensions change nothing.
func testExtend(h *harness) {
	h.create("org", "", false)
	h.deposit("org", 100, "o")
	l, _ := h.acquire("org", 30, 0, hour, t0)
	if l.Granted != 30 || l.Holder != "node-a" {
		h.t.Fatalf("first grant %+v", l)
	}
	h.ingest(t0, []ledger.Usage{leaseUsage(1, l, 10)}, ledger.Accepted)
	n, ev, err := h.s.Extend(h.ctx, l.ID, l.Token, 20, 0, hour, t0+minute)
	if err != nil {
		h.t.Fatal(err)
	}
	if n.ID != l.ID || n.Token != l.Token || n.Granted != 50 || n.Used != 10 || n.ExpiresAt != t0+minute+hour || n.Holder != "node-a" {
		h.t.Fatalf("extended %+v", n)
	}
	if ev != (ledger.Evidence{Remaining: 90, Next: 90, Scope: core.ScopeOrg, Ceiling: 90}) {
		h.t.Fatalf("evidence %+v", ev)
	}
	h.money("org", money{Deposited: 100, TopUpLeft: 50, Outstanding: 40, Settled: 10})

	// Near exhaustion the grant halves (GrantSize); at zero it extends time only.
	n, _, err = h.s.Extend(h.ctx, l.ID, l.Token, 100, 0, hour, t0+2*minute)
	if err != nil || n.Granted != 75 {
		h.t.Fatalf("extend near exhaustion: %v, %+v", err, n)
	}
	h.money("org", money{Deposited: 100, TopUpLeft: 25, Outstanding: 65, Settled: 10})
	n, _, err = h.s.Extend(h.ctx, l.ID, l.Token, 0, 0, 2*hour, t0+3*minute)
	if err != nil || n.Granted != 75 || n.ExpiresAt != t0+3*minute+2*hour {
		h.t.Fatalf("time-only extension: %v, %+v", err, n)
	}
	n, _, err = h.s.Extend(h.ctx, l.ID, l.Token, 25, 25, hour, t0+4*minute)
	if err != nil || n.Granted != 100 {
		h.t.Fatalf("extend to need: %v, %+v", err, n)
	}
	n, ev, err = h.s.Extend(h.ctx, l.ID, l.Token, 10, 0, hour, t0+5*minute)
	if err != nil || n.Granted != 100 || ev.Remaining != 90 {
		h.t.Fatalf("extend of an exhausted chain: %v, %+v, %+v", err, n, ev)
	}
	h.money("org", money{Deposited: 100, Outstanding: 90, Settled: 10})

	_, _, err = h.s.Extend(h.ctx, l.ID, l.Token+1, 10, 0, hour, t0)
	h.wantErr("fenced", err, ledger.ErrFenced)
	_, _, err = h.s.Extend(h.ctx, l.ID, l.Token, 10, 0, 0, t0)
	h.wantErr("ttl 0", err, ledger.ErrInvalid)
	_, _, err = h.s.Extend(h.ctx, 9999, 1, 10, 0, hour, t0)
	h.wantErr("unknown lease", err, ledger.ErrNotFound)

	if _, err := h.s.SetStatus(h.ctx, "org", core.StatusSuspended); err != nil {
		h.t.Fatal(err)
	}
	_, _, err = h.s.Extend(h.ctx, l.ID, l.Token, 10, 0, hour, t0+6*minute)
	h.refusal("suspended", err, ledger.RefusedInactive, "org")
	if got := h.lease(l.ID); got.ExpiresAt != t0+5*minute+hour {
		h.t.Fatalf("refused extension moved the expiry: %+v", got)
	}
	if _, err := h.s.SetStatus(h.ctx, "org", core.StatusActive); err != nil {
		h.t.Fatal(err)
	}
	h.release(h.lease(l.ID), 90, t0+7*minute)
	_, _, err = h.s.Extend(h.ctx, l.ID, l.Token, 10, 0, hour, t0+8*minute)
	h.wantErr("released", err, ledger.ErrLeaseNotActive)
	h.money("org", money{Deposited: 100, TopUpLeft: 90, Settled: 10})

	// A lease funded by one period's allowance cannot take the next one's.
	h.create("daily", "", false)
	h.budget("daily", 100, ledger.PeriodDay, t0)
	d, _ := h.acquire("daily", 40, 0, 2*day, t0)
	_, _, err = h.s.Extend(h.ctx, d.ID, d.Token, 10, 0, day, t0+day)
	h.wantErr("next period", err, ledger.ErrPeriodEnded)
	if got := h.lease(d.ID); got.Granted != 40 || got.ExpiresAt != t0+2*day {
		h.t.Fatalf("extension across a period changed the lease: %+v", got)
	}
}

// testDebt: overage is debt. The funds that arrive next — a deposit, a new
// allowance, a lease's unspent units — repay it before any can be spent,
// and evidence counts it.
func testDebt(h *harness) {
	h.create("ws", "", false)
	h.deposit("ws", 100, "first")
	l, _ := h.acquire("ws", 40, 0, hour, t0)
	post := ledger.Usage{ID: eventID(1), Account: "ws", Source: ledger.UsagePostPaid, Units: 100, OccurredAt: t0}
	h.ingest(t0, []ledger.Usage{post}, ledger.Accepted)
	h.money("ws", money{Deposited: 100, Overage: 40, Outstanding: 40, Settled: 100})
	if ev, err := h.s.Evidence(h.ctx, "ws"); err != nil || ev.Remaining != 0 {
		h.t.Fatalf("evidence of a scope that owes what its leases hold: %+v, %v", ev, err)
	}
	// A smaller top-up only pays part of the debt: nothing to spend.
	h.deposit("ws", 30, "small")
	h.money("ws", money{Deposited: 130, Overage: 10, Outstanding: 40, Settled: 100})
	if a := h.account("ws"); a.Repaid != 30 {
		h.t.Fatalf("repaid %d, want 30", a.Repaid)
	}
	_, _, err := h.s.Acquire(h.ctx, "ws", "node-a", 10, 0, hour, t0)
	h.refusal("in debt", err, ledger.RefusedExhausted, "ws")
	// The lease's unspent units repay the rest first.
	h.release(l, 40, t0+minute)
	h.money("ws", money{Deposited: 130, TopUpLeft: 30, Settled: 100})
	if a := h.account("ws"); a.Repaid != 40 || a.Overage != 0 {
		h.t.Fatalf("after release: %+v", a)
	}
	// A new allowance repays debt too.
	h.create("daily", "", false)
	h.budget("daily", 50, ledger.PeriodDay, t0)
	h.ingest(t0, []ledger.Usage{{ID: eventID(2), Account: "daily", Source: ledger.UsagePostPaid, Units: 80, OccurredAt: t0}}, ledger.Accepted)
	h.money("daily", money{Deposited: 50, Overage: 30, Settled: 80})
	if _, err := h.s.Rollover(h.ctx, t0+day, 10); err != nil {
		h.t.Fatal(err)
	}
	h.money("daily", money{Deposited: 100, AllowanceLeft: 20, Settled: 80})
}

// testReclaim: leases past ExpiresAt+grace are forfeited oldest first, at
// most limit per call; what they held becomes loss; nothing is credited.
func testReclaim(h *harness) {
	h.create("org", "", false)
	h.deposit("org", 1000, "o")
	a, _ := h.acquire("org", 100, 0, 3*minute, t0) // expires t0+3m
	b, _ := h.acquire("org", 100, 0, minute, t0)   // expires t0+1m
	c, _ := h.acquire("org", 100, 0, 2*minute, t0) // expires t0+2m
	d, _ := h.acquire("org", 100, 0, hour, t0)
	h.ingest(t0, []ledger.Usage{leaseUsage(1, b, 30)}, ledger.Accepted)
	reclaim := func(now, grace int64, limit, want int) {
		h.t.Helper()
		if n, err := h.s.Reclaim(h.ctx, now, grace, limit); n != want || err != nil {
			h.t.Fatalf("reclaim at +%ds grace %ds limit %d: %d, %v; want %d", (now-t0)/second, grace/second, limit, n, err, want)
		}
	}
	_, err := h.s.Reclaim(h.ctx, t0, -1, 1)
	h.wantErr("negative grace", err, ledger.ErrInvalid)
	_, err = h.s.Reclaim(h.ctx, t0, 0, 0)
	h.wantErr("limit 0", err, ledger.ErrInvalid)
	reclaim(t0+minute+30*second, minute, 10, 0) // b expired, but within grace
	reclaim(t0+3*minute, minute, 1, 1)          // b then c are due: b (oldest) goes
	if got := h.lease(b.ID); got.State != ledger.LeaseReclaimed || got.Credited != 0 || got.Used != 30 {
		h.t.Fatalf("reclaimed lease %+v", got)
	}
	if got := h.lease(c.ID); got.State != ledger.LeaseActive {
		h.t.Fatalf("c reclaimed before its turn: %+v", got)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 600, Outstanding: 300, Settled: 30, Loss: 70})
	reclaim(t0+3*minute, minute, 10, 1) // c; a is within its grace
	reclaim(t0+4*minute, minute, 10, 1) // a
	reclaim(t0+4*minute, minute, 10, 0)
	h.money("org", money{Deposited: 1000, TopUpLeft: 600, Outstanding: 100, Settled: 30, Loss: 270})
	active, err := h.s.Leases(h.ctx, true)
	if err != nil || len(active) != 1 || active[0] != d {
		h.t.Fatalf("active leases %+v, %v; want only %+v", active, err, d)
	}
	all, err := h.s.Leases(h.ctx, false)
	if err != nil || len(all) != 4 || all[0].ID != a.ID || all[3].ID != d.ID {
		h.t.Fatalf("all leases %+v, %v", all, err)
	}
}

// testConcurrentGrants: racing grants on one account never grant more than
// its balance, and tokens are 1..n without gaps or repeats.
func testConcurrentGrants(h *harness) {
	const callers, each = 6, 8
	h.create("org", "", false)
	h.deposit("org", 200, "o")
	var mu sync.Mutex
	var got []ledger.Lease
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				l, _, err := h.s.Acquire(h.ctx, "org", "node-a", 10, 0, hour, t0)
				if _, refused := errors.AsType[*ledger.Refusal](err); refused {
					continue
				}
				if err != nil {
					h.t.Errorf("acquire: %v", err)
					return
				}
				mu.Lock()
				got = append(got, l)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	tokens := map[uint64]bool{}
	var granted core.CostUnits
	for _, l := range got {
		if tokens[l.Token] {
			h.t.Fatalf("token %d granted twice", l.Token)
		}
		tokens[l.Token] = true
		granted += l.Granted
	}
	for tok := uint64(1); tok <= uint64(len(got)); tok++ {
		if !tokens[tok] {
			h.t.Fatalf("tokens %v are not 1..%d", tokens, len(got))
		}
	}
	a := h.account("org")
	if granted > 200 || a.Outstanding != granted || a.TopUpLeft != 200-granted || a.NextToken != uint64(len(got))+1 {
		h.t.Fatalf("granted %d in %d leases; account %+v", granted, len(got), a)
	}
	if all, _ := h.s.Leases(h.ctx, true); len(all) != len(got) {
		h.t.Fatalf("%d active leases, %d granted", len(all), len(got))
	}
}
