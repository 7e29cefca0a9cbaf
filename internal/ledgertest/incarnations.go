package ledgertest

import (
	"errors"
	"slices"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// testIncarnations: a node id's first start is incarnation 1; a start on
// its data directory is the same incarnation again; a start on an empty
// one is the next; an older data directory is stale and a newer one
// unknown, and a refusal changes nothing. Leases granted to the current
// incarnation keep its grace, others none; every incarnation survives a
// restart.
func testIncarnations(h *harness) {
	inc := func(node string, spool uint64, grace, now int64) ledger.Incarnation {
		h.t.Helper()
		i, err := h.s.Incarnate(h.ctx, node, spool, grace, now)
		if err != nil {
			h.t.Fatalf("incarnate %s from spool %d: %v", node, spool, err)
		}
		return i
	}
	refused := func(node string, spool uint64, want error, current uint64) {
		h.t.Helper()
		_, err := h.s.Incarnate(h.ctx, node, spool, second, t0)
		ie, ok := errors.AsType[*ledger.IncarnationError](err)
		if !errors.Is(err, want) || !ok || ie.Spool != spool || ie.Current.Number != current || ie.Current.Node != node {
			h.t.Fatalf("incarnate %s from spool %d: %v (%+v), want %v with current %d", node, spool, err, ie, want, current)
		}
	}
	for _, bad := range []struct {
		node  string
		grace int64
	}{{"", 0}, {"a#2", 0}, {"a", -1}, {"a", ledger.MaxGrace + 1}} {
		_, err := h.s.Incarnate(h.ctx, bad.node, 0, bad.grace, t0)
		h.wantErr("invalid incarnate", err, ledger.ErrInvalid)
	}
	refused("node-a", 2, ledger.ErrUnknownIncarnation, 0)
	if got := inc("node-a", 0, 10*second, t0); got != (ledger.Incarnation{Node: "node-a", Number: 1, Grace: 10 * second, StartedAt: t0}) {
		h.t.Fatalf("first start: %+v", got)
	}
	if got := inc("node-a", 1, 20*second, t0+minute); got.Number != 1 || got.Grace != 20*second || got.Holder() != "node-a" {
		h.t.Fatalf("restart on its data directory: %+v", got)
	}
	if got := inc("node-b", 1, 0, t0); got.Number != 1 || got.Grace != 0 {
		h.t.Fatalf("a first start of a data directory that names incarnation 1: %+v", got)
	}

	h.create("org", "", false)
	h.deposit("org", 1000, "o")
	first, _ := h.acquireAs("org", "node-a", 100, hour, t0)
	if first.Grace != 20*second {
		h.t.Fatalf("a lease of the current incarnation keeps its grace: %+v", first)
	}
	next := inc("node-a", 0, 30*second, t0+2*minute) // an empty data directory
	if next.Number != 2 || next.Holder() != "node-a#2" || next.Grace != 30*second {
		h.t.Fatalf("start on an empty data directory: %+v", next)
	}
	refused("node-a", 1, ledger.ErrStaleIncarnation, 2)
	refused("node-a", 3, ledger.ErrUnknownIncarnation, 2)
	cur, _ := h.acquireAs("org", next.Holder(), 100, hour, t0)
	old, _ := h.acquireAs("org", "node-a", 100, hour, t0) // the holder of a superseded incarnation
	other, _ := h.acquireAs("org", "stranger", 100, hour, t0)
	for _, c := range []struct {
		l     ledger.Lease
		grace int64
	}{{cur, 30 * second}, {old, ledger.NoGrace}, {other, ledger.NoGrace}} {
		if c.l.Grace != c.grace || h.lease(c.l.ID).Grace != c.grace {
			h.t.Fatalf("lease of %s keeps grace %d (stored %d), want %d", c.l.Holder, c.l.Grace, h.lease(c.l.ID).Grace, c.grace)
		}
	}
	h.restart()
	all, err := h.s.Incarnations(h.ctx)
	want := []ledger.Incarnation{{Node: "node-a", Number: 2, Grace: 30 * second, StartedAt: t0 + 2*minute}, {Node: "node-b", Number: 1, StartedAt: t0}}
	if err != nil || !slices.Equal(all, want) {
		h.t.Fatalf("incarnations after a restart: %+v, %v; want %+v", all, err, want)
	}
	if got := inc("node-a", 2, 30*second, t0+3*minute); got.Number != 2 {
		h.t.Fatalf("the second incarnation again: %+v", got)
	}
	for holder, ids := range map[string][]uint64{"node-a": {first.ID, old.ID}, "node-a#2": {cur.ID}, "nobody": nil} {
		got, err := h.s.LeasesOf(h.ctx, holder)
		var gotIDs []uint64
		for _, l := range got {
			gotIDs = append(gotIDs, l.ID)
		}
		if err != nil || !slices.Equal(gotIDs, ids) {
			h.t.Fatalf("leases of %s: %v, %v; want %v", holder, gotIDs, err, ids)
		}
	}
}

// testReclaimKeepsEachLeasesGrace: a lease is forfeited after its own
// holder's grace, whatever grace the reclaiming node runs with; a lease
// that keeps none takes the reclaimer's. Earliest reclaimable first.
func testReclaimKeepsEachLeasesGrace(h *harness) {
	for node, grace := range map[string]int64{"patient": 10 * minute, "hasty": 0} {
		if _, err := h.s.Incarnate(h.ctx, node, 0, grace, t0); err != nil {
			h.t.Fatal(err)
		}
	}
	h.create("org", "", false)
	h.deposit("org", 1000, "o")
	patient, _ := h.acquireAs("org", "patient", 100, minute, t0) // reclaimable at t0+11m
	hasty, _ := h.acquireAs("org", "hasty", 100, 2*minute, t0)   // at t0+2m
	legacy, _ := h.acquireAs("org", "legacy", 100, minute, t0)   // at t0+1m + the reclaimer's grace
	reclaim := func(now, grace int64, want ...uint64) {
		h.t.Helper()
		n, err := h.s.Reclaim(h.ctx, now, grace, 1)
		if err != nil || n != len(want) {
			h.t.Fatalf("reclaim at +%dm with grace %dm: %d, %v; want %v", (now-t0)/minute, grace/minute, n, err, want)
		}
		for _, id := range want {
			if l := h.lease(id); l.State != ledger.LeaseReclaimed {
				h.t.Fatalf("lease %d not reclaimed: %+v", id, l)
			}
		}
	}
	reclaim(t0+90*second, 0, legacy.ID)     // the reclaimer's grace 0: legacy is due at +1m, before hasty
	reclaim(t0+5*minute, 0, hasty.ID)       // patient is not due: its own grace is 10 minutes
	reclaim(t0+10*minute, 0)                // still within patient's grace
	reclaim(t0+11*minute, hour, patient.ID) // the reclaimer's long grace does not hold it either
	h.money("org", money{Deposited: 1000, TopUpLeft: 700, Loss: 300})
}

// testReleaseRestoresAForfeitedLease: a lease forfeited while its holder
// could not reach the ledger is restored when the holder releases it: what
// it did not spend comes back from loss to the balance, what it spent and
// has yet to settle stays provisional loss that its late usage takes, and
// the lease ends released. Only once, and only with its token.
func testReleaseRestoresAForfeitedLease(h *harness) {
	h.create("org", "", false)
	h.deposit("org", 1000, "o")
	l, _ := h.acquire("org", 300, 0, minute, t0)
	h.ingest(t0, []ledger.Usage{leaseUsage(1, l, 40)}, ledger.Accepted)
	if n, err := h.s.Reclaim(h.ctx, t0+2*minute, 0, 10); n != 1 || err != nil {
		h.t.Fatalf("reclaim: %d, %v", n, err)
	}
	h.money("org", money{Deposited: 1000, TopUpLeft: 700, Settled: 40, Loss: 260})
	if got, err := h.s.LeasesOf(h.ctx, "node-a"); err != nil || len(got) != 1 || got[0].State != ledger.LeaseReclaimed {
		h.t.Fatalf("a forfeited lease is still its holder's: %+v, %v", got, err)
	}
	h.wantErr("restore with another token", h.s.Release(h.ctx, l.ID, l.Token+1, 0, t0+3*minute), ledger.ErrFenced)
	h.wantErr("restore more than was forfeited", h.s.Release(h.ctx, l.ID, l.Token, 261, t0+3*minute), ledger.ErrInvalid)
	h.money("org", money{Deposited: 1000, TopUpLeft: 700, Settled: 40, Loss: 260})
	// The holder spent 60 more, in its spool, and did not spend 200.
	h.release(l, 200, t0+3*minute)
	h.money("org", money{Deposited: 1000, TopUpLeft: 900, Settled: 40, Loss: 60})
	if got := h.lease(l.ID); got.State != ledger.LeaseReleased || got.Credited != 200 || got.Used != 40 {
		h.t.Fatalf("restored lease %+v", got)
	}
	if got, err := h.s.LeasesOf(h.ctx, "node-a"); err != nil || len(got) != 0 {
		h.t.Fatalf("a restored lease is no longer its holder's to answer for: %+v, %v", got, err)
	}
	h.ingest(t0+4*minute, []ledger.Usage{leaseUsage(2, l, 60)}, ledger.Accepted)
	h.money("org", money{Deposited: 1000, TopUpLeft: 900, Settled: 100})
	h.wantErr("restore twice", h.s.Release(h.ctx, l.ID, l.Token, 0, t0+5*minute), ledger.ErrLeaseNotActive)
	h.restart()
	h.money("org", money{Deposited: 1000, TopUpLeft: 900, Settled: 100})
}

// acquireAs is acquire for holder.
func (h *harness) acquireAs(id core.AccountID, holder string, want core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence) {
	h.t.Helper()
	l, ev, err := h.s.Acquire(h.ctx, id, holder, want, 0, ttl, now)
	if err != nil {
		h.t.Fatalf("acquire %d for %s as %s: %v", want, id, holder, err)
	}
	return l, ev
}
