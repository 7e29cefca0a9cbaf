package ledgertest

import (
	"reflect"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// snapshot is everything a store can be asked, for comparing before and
// after a restart.
type snapshot struct {
	Accounts []ledger.Account
	All      []ledger.Lease
	Active   []ledger.Lease
	Keys     []ledger.Key
	Tokens   []ledger.PlatformToken
	Audit    []ledger.AuditRecord
	Usage    []ledger.Usage
	Digest   [32]byte
}

func (h *harness) snapshot(usageOf core.AccountID) snapshot {
	h.t.Helper()
	var s snapshot
	var err error
	must := func(e error) {
		h.t.Helper()
		if e != nil {
			h.t.Fatal(e)
		}
	}
	s.Accounts, err = h.s.Accounts(h.ctx)
	must(err)
	s.All, err = h.s.Leases(h.ctx, false)
	must(err)
	s.Active, err = h.s.Leases(h.ctx, true)
	must(err)
	s.Keys, err = h.s.Keys(h.ctx, "")
	must(err)
	s.Tokens, err = h.s.PlatformTokens(h.ctx)
	must(err)
	s.Audit, err = h.s.AuditLog(h.ctx, 0, 1000)
	must(err)
	s.Usage, err = h.s.UsageOf(h.ctx, usageOf, 1000)
	must(err)
	s.Digest, _, err = h.s.AdminTokenDigest(h.ctx)
	must(err)
	return s
}

// testRestartKeepsEverything: every acknowledged change survives a
// restart, and so do the idempotency records, the fencing tokens and the
// sequences.
func testRestartKeepsEverything(h *harness) {
	h.create("org", "", false)
	h.create("agent", "org", false)
	h.budget("org", 50, ledger.PeriodWeek, t0)
	h.deposit("org", 500, "o")
	h.deposit("agent", 200, "a")
	if _, err := h.s.SetPolicy(h.ctx, "agent", []byte(`{"p":1}`)); err != nil {
		h.t.Fatal(err)
	}
	l, _ := h.acquire("agent", 100, 0, hour, t0)
	m, _ := h.acquire("agent", 20, 0, hour, t0)
	h.ingest(t0, []ledger.Usage{leaseUsage(1, l, 30), {ID: eventID(2), Account: "agent", Source: ledger.UsageOverage, Units: 4}},
		ledger.Accepted, ledger.Accepted)
	h.release(m, 20, t0)
	if err := h.s.AddKey(h.ctx, ledger.Key{ID: "k", Account: "agent", Digest: [32]byte{7}, CreatedAt: t0}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.s.AddPlatformToken(h.ctx, ledger.PlatformToken{ID: "p", Digest: [32]byte{8}}); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.s.SetAdminTokenDigest(h.ctx, [32]byte{9}); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.s.Audit(h.ctx, ledger.AuditRecord{At: t0, Actor: "a", Action: "b", Target: "c"}); err != nil {
		h.t.Fatal(err)
	}
	before := h.snapshot("agent")
	h.restart()
	if after := h.snapshot("agent"); !reflect.DeepEqual(before, after) {
		h.t.Fatalf("restart changed the store:\nbefore %+v\n after %+v", before, after)
	}
	h.check()

	// Idempotency and sequences carry on where they were.
	if _, dup, err := h.s.Deposit(h.ctx, "org", 500, "o", t0); !dup || err != nil {
		h.t.Fatalf("deposit repeat after restart: dup %v, %v", dup, err)
	}
	h.ingest(t0, []ledger.Usage{leaseUsage(1, l, 30)}, ledger.Duplicate)
	n, _ := h.acquire("agent", 10, 0, hour, t0)
	if n.Token != 3 || n.ID <= m.ID {
		h.t.Fatalf("lease after restart %+v (previous %+v)", n, m)
	}
	if seq, err := h.s.Audit(h.ctx, ledger.AuditRecord{}); seq != 2 || err != nil {
		h.t.Fatalf("audit after restart: %d, %v", seq, err)
	}
	// Active leases are still reclaimable after a restart.
	if k, err := h.s.Reclaim(h.ctx, t0+2*hour, 0, 10); k != 2 || err != nil {
		h.t.Fatalf("reclaim after restart: %d, %v", k, err)
	}
	h.restart()
	h.money("agent", money{Deposited: 200, TopUpLeft: 86, Settled: 34, Loss: 80})
	// The org's 50 allowance paid half of l; the rest came from top-ups.
	h.money("org", money{Deposited: 550, TopUpLeft: 436, Settled: 34, Loss: 80})
}
