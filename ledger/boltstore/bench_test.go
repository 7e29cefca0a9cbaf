package boltstore

import (
	"context"
	"strconv"
	"testing"

	"github.com/tollgated/tollgated/internal/ledgertest"
	"github.com/tollgated/tollgated/ledger"
)

// Every mutation below is one committed, fsync'd bbolt transaction, so
// these measure the durable path end to end: on a disk they are bound by
// the device's sync latency, not by the encoding.

// benchStore is ledgertest's benchmark ledger on a fresh file.
func benchStore(b *testing.B) ledger.Store {
	b.Helper()
	s, err := Open(b.TempDir()+"/ledger.db", Options{})
	if err != nil {
		b.Fatal(err)
	}
	return ledgertest.BenchLedger(b, s, t0)
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

// BenchmarkIngest256 ingests batches of 256 lease-usage events against one
// lease: one transaction per batch (ledgertest.BenchIngest).
func BenchmarkIngest256(b *testing.B) { ledgertest.BenchIngest(b, benchStore(b), 256, t0) }

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
