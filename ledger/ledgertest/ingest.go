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
	h.create("org", "", false)
	h.create("ws", "org", true)
	h.create("agent", "ws", false)
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
