package ledgertest

import (
	"errors"
	"reflect"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// testIngestLeaseUsage: usage against an active lease is billed from
// Outstanding up to Granted; anything that does not belong to the lease is
// rejected; every id counts once, rejected ones included.
func testIngestLeaseUsage(h *harness) {
	h.create("org", "", false)
	h.create("agent", "org", false)
	h.deposit("org", 1000, "o")
	h.deposit("agent", 1000, "a")
	l, _ := h.acquire("agent", 100, 0, hour, t0)
	other, _ := h.acquire("org", 100, 0, hour, t0)
	bad := func(n uint64, edit func(u *ledger.Usage)) ledger.Usage {
		u := leaseUsage(n, l, 1)
		edit(&u)
		return u
	}
	h.ingest(t0, []ledger.Usage{
		leaseUsage(1, l, 60),
		leaseUsage(1, l, 60), // the same id again, in the same batch
		leaseUsage(2, l, 41), // 60 + 41 > 100
		leaseUsage(3, l, 40),
		bad(4, func(u *ledger.Usage) { u.Token++ }),
		bad(5, func(u *ledger.Usage) { u.LeaseID = other.ID; u.Token = other.Token }), // another account's lease
		bad(6, func(u *ledger.Usage) { u.LeaseID = 999 }),
		bad(7, func(u *ledger.Usage) { u.Units = 0 }),
		bad(8, func(u *ledger.Usage) { u.Account = "nobody" }),
		bad(9, func(u *ledger.Usage) { u.Source = 0 }),
		leaseUsage(10, l, 1), // the lease is fully used
	},
		ledger.Accepted, ledger.Duplicate, ledger.Rejected, ledger.Accepted,
		ledger.Rejected, ledger.Rejected, ledger.Rejected, ledger.Rejected, ledger.Rejected, ledger.Rejected, ledger.Rejected)
	if got := h.lease(l.ID); got.Used != 100 || got.State != ledger.LeaseActive {
		h.t.Fatalf("lease %+v", got)
	}
	h.money("agent", money{Deposited: 1000, TopUpLeft: 900, Settled: 100})
	h.money("org", money{Deposited: 1000, TopUpLeft: 800, Outstanding: 100, Settled: 100})
	// A retried batch is all duplicates, rejected ones too: verdicts are final.
	h.ingest(t0, []ledger.Usage{leaseUsage(1, l, 60), leaseUsage(2, l, 1), bad(4, func(u *ledger.Usage) {})},
		ledger.Duplicate, ledger.Duplicate, ledger.Duplicate)
	h.money("agent", money{Deposited: 1000, TopUpLeft: 900, Settled: 100})
	if res, err := h.s.Ingest(h.ctx, nil, t0); err != nil || len(res) != 0 {
		h.t.Fatalf("empty batch: %v, %v", res, err)
	}
}

// testLateUsage: usage arriving after a release or reclaim converts the
// lease's provisional loss into billed usage, never more than the loss.
func testLateUsage(h *harness) {
	h.create("org", "", false)
	h.deposit("org", 1000, "o")
	l, _ := h.acquire("org", 100, 0, minute, t0)
	h.release(l, 30, t0) // 70 of provisional loss
	h.money("org", money{Deposited: 1000, TopUpLeft: 930, Loss: 70})
	h.ingest(t0, []ledger.Usage{leaseUsage(1, l, 50), leaseUsage(2, l, 21), leaseUsage(3, l, 20)},
		ledger.Accepted, ledger.Rejected, ledger.Accepted)
	h.money("org", money{Deposited: 1000, TopUpLeft: 930, Settled: 70})
	if got := h.lease(l.ID); got.Used != 70 || got.Credited != 30 || got.State != ledger.LeaseReleased {
		h.t.Fatalf("lease %+v", got)
	}
	m, _ := h.acquire("org", 100, 0, minute, t0)
	if n, err := h.s.Reclaim(h.ctx, t0+2*minute, 0, 10); n != 1 || err != nil {
		h.t.Fatalf("reclaim: %d, %v", n, err)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 830, Settled: 70, Loss: 100})
	h.ingest(t0+3*minute, []ledger.Usage{leaseUsage(4, m, 100), leaseUsage(5, m, 1)}, ledger.Accepted, ledger.Rejected)
	h.money("org", money{Deposited: 1000, TopUpLeft: 830, Settled: 170})
}

// testOverageAndPostPaid: elastic overage and post-paid usage are billed
// to the whole chain, each scope paying from its balance (allowance first)
// and owing the rest as overage, which the next funds to arrive repay.
func testOverageAndPostPaid(h *harness) {
	h.chain()
	h.budget("org", 10, ledger.PeriodDay, t0)
	h.deposit("org", 5, "o")
	h.deposit("agent", 100, "a")
	h.ingest(t0, []ledger.Usage{
		{ID: eventID(1), Account: "agent", Source: ledger.UsageOverage, Units: 7},
		{ID: eventID(2), Account: "agent", Source: ledger.UsagePostPaid, Units: 20},
		{ID: eventID(3), Account: "ws", Source: ledger.UsagePostPaid, Units: 3},
		{ID: eventID(4), Account: "agent", Source: ledger.UsagePostPaid, Units: 0},
	}, ledger.Accepted, ledger.Accepted, ledger.Accepted, ledger.Rejected)
	h.money("agent", money{Deposited: 100, TopUpLeft: 73, Settled: 27})
	h.money("ws", money{})
	// The org paid the 7 and 3 of the 20 from its allowance, 5 from
	// top-ups; 12 over. Then 3 more for the workspace, all overage.
	h.money("org", money{Deposited: 15, Overage: 15, Settled: 30})
	// After midnight the new allowance repays 10 of the debt first, so the
	// next post-paid usage finds nothing left and is all overage.
	h.ingest(nextMidnight+hour, []ledger.Usage{{ID: eventID(5), Account: "org", Source: ledger.UsagePostPaid, Units: 4}}, ledger.Accepted)
	h.money("org", money{Deposited: 25, Overage: 9, Settled: 34})

	got, err := h.s.UsageOf(h.ctx, "agent", 10)
	if err != nil {
		h.t.Fatal(err)
	}
	want := []ledger.Usage{ // accepted only, newest first
		{ID: eventID(2), Account: "agent", Source: ledger.UsagePostPaid, Units: 20},
		{ID: eventID(1), Account: "agent", Source: ledger.UsageOverage, Units: 7},
	}
	if !reflect.DeepEqual(got, want) {
		h.t.Fatalf("usage of agent %+v\nwant %+v", got, want)
	}
	if got, err = h.s.UsageOf(h.ctx, "agent", 1); err != nil || len(got) != 1 || got[0].ID != eventID(2) {
		h.t.Fatalf("usage limit 1: %+v, %v", got, err)
	}
	if got, err = h.s.UsageOf(h.ctx, "ws", 10); err != nil || len(got) != 1 || got[0].Units != 3 {
		h.t.Fatalf("usage of ws: %+v, %v", got, err)
	}
	_, err = h.s.UsageOf(h.ctx, "nobody", 10)
	h.wantErr("usage of an unknown account", err, ledger.ErrNotFound)
	_, err = h.s.UsageOf(h.ctx, "agent", 0)
	h.wantErr("usage limit 0", err, ledger.ErrInvalid)
}

// testIngestIsAllOrNothing: an event that overflows fails the whole batch,
// and nothing of it is recorded, not even the ids of its good events.
func testIngestIsAllOrNothing(h *harness) {
	h.create("org", "", false)
	h.deposit("org", 100, "o")
	l, _ := h.acquire("org", 10, 0, hour, t0)
	good := leaseUsage(1, l, 5)
	huge := ledger.Usage{ID: eventID(2), Account: "org", Source: ledger.UsageOverage, Units: core.MaxCostUnits - 50}
	huger := huge
	huger.ID = eventID(3) // together they overflow Settled
	res, err := h.s.Ingest(h.ctx, []ledger.Usage{good, huge, huger}, t0)
	if !errors.Is(err, ledger.ErrOverflow) || res != nil {
		h.t.Fatalf("overflowing batch: %v, %v", res, err)
	}
	h.money("org", money{Deposited: 100, TopUpLeft: 90, Outstanding: 10})
	if got := h.lease(l.ID); got.Used != 0 {
		h.t.Fatalf("failed batch used the lease: %+v", got)
	}
	h.ingest(t0, []ledger.Usage{good}, ledger.Accepted)
	h.money("org", money{Deposited: 100, TopUpLeft: 90, Outstanding: 5, Settled: 5})
	if got, _ := h.s.UsageOf(h.ctx, "org", 10); len(got) != 1 {
		h.t.Fatalf("usage after a failed batch %+v", got)
	}
}

// testForgetEvents: an id is a Duplicate until the caller forgets the ids
// ingested before some time, oldest first and at most limit per call; a
// forgotten id is new again. What is forgotten stays forgotten across a
// restart, and what is remembered stays remembered.
func testForgetEvents(h *harness) {
	h.create("org", "", false)
	h.deposit("org", 1000, "o")
	post := func(n uint64) ledger.Usage {
		return ledger.Usage{ID: eventID(n), Account: "org", Source: ledger.UsagePostPaid, Units: 1}
	}
	h.ingest(t0, []ledger.Usage{post(1), post(2)}, ledger.Accepted, ledger.Accepted)
	h.ingest(t0+hour, []ledger.Usage{post(3), {ID: eventID(4), Account: "org", Source: ledger.UsagePostPaid}},
		ledger.Accepted, ledger.Rejected)
	forget := func(before int64, limit, want int) {
		h.t.Helper()
		if n, err := h.s.ForgetEvents(h.ctx, before, limit); n != want || err != nil {
			h.t.Fatalf("ForgetEvents(%d, %d) = %d, %v; want %d", before-t0, limit, n, err, want)
		}
	}
	forget(t0, 10, 0) // nothing was ingested before t0
	forget(t0+hour, 1, 1)
	h.restart()
	forget(t0+hour, 10, 1)
	forget(t0+hour, 10, 0)
	_, err := h.s.ForgetEvents(h.ctx, t0+hour, 0)
	h.wantErr("a limit of 0", err, ledger.ErrInvalid)
	// 1 and 2 are forgotten: new again. 3 and the rejected 4 are remembered.
	h.ingest(t0+2*hour, []ledger.Usage{post(1), post(2), post(3), post(4)},
		ledger.Accepted, ledger.Accepted, ledger.Duplicate, ledger.Duplicate)
	h.money("org", money{Deposited: 1000, TopUpLeft: 995, Settled: 5})
	forget(t0+3*hour, 10, 4) // 3, 4, and the second 1 and 2
	h.ingest(t0+3*hour, []ledger.Usage{post(3)}, ledger.Accepted)
}

// testSettle: a node's settlements bill totals exactly once by its export
// mark: a replayed batch is a duplicate, an overlapping one is refused,
// totals take what their lease can (late usage of an ended lease takes
// what it lost), and each node has its own mark.
func testSettle(h *harness) {
	h.create("org", "", false)
	h.deposit("org", 1000, "o")
	l, _ := h.acquire("org", 100, 0, hour, t0)
	settle := func(st ledger.Settlement) ledger.SettleResult {
		h.t.Helper()
		r, err := h.s.Settle(h.ctx, st, t0)
		if err != nil {
			h.t.Fatalf("settle %+v: %v", st, err)
		}
		return r
	}
	lu := func(l ledger.Lease, units core.CostUnits) ledger.LeaseUsage {
		return ledger.LeaseUsage{Account: l.Account, LeaseID: l.ID, Token: l.Token, Units: units}
	}
	over := ledger.Usage{ID: eventID(8), Account: "org", Source: ledger.UsageOverage, Units: 5}
	lease := ledger.Usage{ID: eventID(9), Account: "org", Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: 30}
	first := ledger.Settlement{Node: "n1", From: 0, To: 10, Events: 7,
		Leases: []ledger.LeaseUsage{lu(l, 30)}, Overage: []ledger.LeaseUsage{{Account: "org", Units: 5}},
		History: []ledger.Usage{lease, over}}
	if r := settle(first); r.Duplicate || r.Accepted != 35 || r.Rejected != 0 {
		h.t.Fatalf("first settlement: %+v", r)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 895, Outstanding: 70, Settled: 35})
	if got := h.lease(l.ID); got.Used != 30 {
		h.t.Fatalf("lease after settlement %+v", got)
	}
	// The same batch again (a crash before the spool learned it was
	// billed): nothing changes.
	if r := settle(first); !r.Duplicate || r.Accepted != 0 {
		h.t.Fatalf("replayed settlement: %+v", r)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 895, Outstanding: 70, Settled: 35})
	if m, err := h.s.ExportMark(h.ctx, "n1"); m != 10 || err != nil {
		h.t.Fatalf("mark %d, %v", m, err)
	}
	// A batch that starts inside what the mark covers cannot be split.
	_, err := h.s.Settle(h.ctx, ledger.Settlement{Node: "n1", From: 5, To: 20, Leases: []ledger.LeaseUsage{lu(l, 1)},
		History: []ledger.Usage{{Account: "org", LeaseID: l.ID, Token: l.Token, Units: 1}}}, t0)
	h.wantErr("overlap", err, ledger.ErrMarkOverlap)
	if got, err := h.s.UsageOf(h.ctx, "org", 10); err != nil || !reflect.DeepEqual(got, []ledger.Usage{over, lease}) {
		h.t.Fatalf("history of refused and replayed settlements: %+v, %v", got, err)
	}
	_, err = h.s.Settle(h.ctx, ledger.Settlement{Node: "n1", From: 20, To: 20}, t0)
	h.wantErr("empty range", err, ledger.ErrInvalid)
	_, err = h.s.Settle(h.ctx, ledger.Settlement{From: 20, To: 21}, t0)
	h.wantErr("no node", err, ledger.ErrInvalid)
	// More than the lease holds: what fits is billed, the rest rejected; a
	// wrong token or an unknown lease bills nothing. The account's history
	// shows what was billed of each event, first come, first billed.
	ev := func(n uint64, token uint64, units core.CostUnits) ledger.Usage {
		return ledger.Usage{ID: eventID(n), Account: "org", Source: ledger.UsageLease, LeaseID: l.ID, Token: token, Units: units}
	}
	r := settle(ledger.Settlement{Node: "n1", From: 10, To: 20, Leases: []ledger.LeaseUsage{
		lu(l, 80), {Account: "org", LeaseID: l.ID, Token: l.Token + 1, Units: 3}, {Account: "org", LeaseID: 999, Token: 1, Units: 4}},
		History: []ledger.Usage{ev(1, l.Token, 50), ev(2, l.Token+1, 3), ev(3, l.Token, 25), ev(4, l.Token, 5)}})
	if r.Accepted != 70 || r.Rejected != 17 {
		h.t.Fatalf("oversized settlement: %+v", r)
	}
	got, err := h.s.UsageOf(h.ctx, "org", 10)
	if want := []ledger.Usage{ev(3, l.Token, 20), ev(1, l.Token, 50), over, lease}; err != nil || !reflect.DeepEqual(got, want) {
		h.t.Fatalf("history after a settlement: %+v, %v\nwant %+v", got, err, want)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 895, Settled: 105})
	// Late usage of a released lease turns its provisional loss into
	// billed usage, and no more; another node's mark is its own, and a
	// gap after a mark (records billed another way) is allowed.
	m, _ := h.acquire("org", 50, 0, hour, t0)
	h.release(m, 20, t0) // 30 provisional loss
	h.money("org", money{Deposited: 1000, TopUpLeft: 865, Settled: 105, Loss: 30})
	r = settle(ledger.Settlement{Node: "n2", From: 40, To: 41, Leases: []ledger.LeaseUsage{lu(m, 35)}})
	if r.Accepted != 30 || r.Rejected != 5 {
		h.t.Fatalf("late usage: %+v", r)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 865, Settled: 135})
	if m1, _ := h.s.ExportMark(h.ctx, "n1"); m1 != 20 {
		h.t.Fatalf("n1's mark moved with n2's settlement: %d", m1)
	}
	// A forfeited lease takes its late usage from the forfeit.
	f, _ := h.acquire("org", 40, 0, minute, t0)
	if n, err := h.s.Reclaim(h.ctx, t0+2*minute, 0, 10); n != 1 || err != nil {
		h.t.Fatalf("reclaim %d, %v", n, err)
	}
	r = settle(ledger.Settlement{Node: "n1", From: 30, To: 31, Leases: []ledger.LeaseUsage{lu(f, 15)}})
	if r.Accepted != 15 {
		h.t.Fatalf("late usage of a forfeited lease: %+v", r)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 825, Settled: 150, Loss: 25})
	h.check()
	h.restart()
	if m1, _ := h.s.ExportMark(h.ctx, "n1"); m1 != 31 {
		h.t.Fatalf("n1's mark after a restart: %d", m1)
	}
}
