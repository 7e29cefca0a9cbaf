package ledgertest

import (
	"encoding/binary"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// The benchmarks' ledger and load, which both backends run on stores of
// their own, so that their numbers compare.

// BenchLedger sets s up as every benchmark starts at now: an org →
// workspace (unmetered) → agent hierarchy with a monthly allowance on the
// org and top-ups on org and agent large enough for any b.N, so every
// grant debits a two-account funding chain. s is closed when b ends.
func BenchLedger(b *testing.B, s ledger.Store, now int64) ledger.Store {
	b.Helper()
	ctx := b.Context()
	b.Cleanup(func() { s.Close() })
	for _, spec := range []ledger.AccountSpec{{ID: "org"}, {ID: "ws", Parent: "org", Unmetered: true}, {ID: "agent", Parent: "ws"}} {
		if _, _, err := s.CreateAccount(ctx, spec, now); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.SetBudget(ctx, "org", ledger.Budget{Allowance: 1 << 20, Period: ledger.PeriodMonth}, now); err != nil {
		b.Fatal(err)
	}
	for _, id := range []core.AccountID{"org", "agent"} {
		if _, _, err := s.Deposit(ctx, id, 1<<60, "bench", now); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchIngest ingests batches of size lease-usage events (one unit each,
// distinct ids) against one lease of s, a BenchLedger set up at now: one
// transaction per batch. The ids grow with time and are ingested at the
// clock, as the daemon sends them (the shards' request ids lead with their
// commit time).
func BenchIngest(b *testing.B, s ledger.Store, size int, now int64) {
	ctx := b.Context()
	l, _, err := s.Acquire(ctx, "agent", "node-a", 1<<40, 1<<40, 1<<60, now)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]ledger.Usage, size)
	var n uint64
	b.ReportAllocs()
	for b.Loop() {
		now += 1e6
		for i := range batch {
			n++
			batch[i] = ledger.Usage{Account: "agent", Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: 1, OccurredAt: now}
			binary.BigEndian.PutUint64(batch[i].ID[:], n)
		}
		res, err := s.Ingest(ctx, batch, now)
		if err != nil || res[size-1] != ledger.Accepted {
			b.Fatalf("ingest: %v, %v", res[size-1], err)
		}
	}
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
}
