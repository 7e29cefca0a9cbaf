package boltstore

import (
	"context"
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Every mutation below is one committed, fsync'd bbolt transaction, so
// these measure the durable path end to end: on a disk they are bound by
// the device's sync latency, not by the encoding.

// benchStore is an org → workspace (unmetered) → agent hierarchy with a
// daily allowance on the org and top-ups on org and agent large enough
// for any b.N, so every grant debits a two-account funding chain.
func benchStore(b *testing.B) *Store {
	b.Helper()
	ctx := context.Background()
	s, err := Open(b.TempDir()+"/ledger.db", Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for _, spec := range []ledger.AccountSpec{{ID: "org"}, {ID: "ws", Parent: "org", Unmetered: true}, {ID: "agent", Parent: "ws"}} {
		if _, _, err := s.CreateAccount(ctx, spec, t0); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.SetBudget(ctx, "org", ledger.Budget{Allowance: 1 << 20, Period: ledger.PeriodMonth}, t0); err != nil {
		b.Fatal(err)
	}
	for _, id := range []core.AccountID{"org", "agent"} {
		if _, _, err := s.Deposit(ctx, id, 1<<60, "bench", t0); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func BenchmarkAcquire(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Acquire(ctx, "agent", "node-a", 100, 0, 60e9, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRelease(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	var leases []ledger.Lease
	for range b.N {
		l, _, err := s.Acquire(ctx, "agent", "node-a", 100, 0, 60e9, t0)
		if err != nil {
			b.Fatal(err)
		}
		leases = append(leases, l)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, l := range leases {
		if err := s.Release(ctx, l.ID, l.Token, 60, t0+1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIngest256 ingests batches of 256 lease-usage events (one unit
// each, distinct ids) against one lease: one transaction per batch.
func BenchmarkIngest256(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	l, _, err := s.Acquire(ctx, "agent", "node-a", 1<<40, 1<<40, 1<<60, t0)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]ledger.Usage, 256)
	var n uint64
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		// As the daemon sends them: ids that grow with time (the shards'
		// request ids lead with their commit time), ingested at the clock.
		now += 1e6
		for i := range batch {
			n++
			batch[i] = ledger.Usage{Account: "agent", Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: 1, OccurredAt: now}
			binary.BigEndian.PutUint64(batch[i].ID[:], n)
		}
		res, err := s.Ingest(ctx, batch, now)
		if err != nil || res[255] != ledger.Accepted {
			b.Fatalf("ingest: %v, %v", res[255], err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDeposit(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, _, err := s.Deposit(ctx, "agent", 1, strconv.Itoa(i), t0); err != nil {
			b.Fatal(err)
		}
	}
}
