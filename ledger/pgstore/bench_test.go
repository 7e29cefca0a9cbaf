package pgstore

// Benchmarks of both backends, side by side in one run:
//
//	go test -run '^$' -bench . -benchtime 2s ./ledger/pgstore/
//
// Each mutation is one committed, durable transaction on either side:
// bbolt fsyncs its file, and the benchmark's PostgreSQL runs with fsync and
// synchronous commit on (see TestMain). PostgreSQL is on loopback, so its
// numbers include a client round trip per statement.

import (
	"context"
	"testing"

	"github.com/tollgated/tollgated/internal/ledgertest"
	"github.com/tollgated/tollgated/internal/pgtest"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

// backends opens a fresh store of each kind.
var backends = []struct {
	name string
	open func(b *testing.B) ledger.Store
}{
	{"bolt", func(b *testing.B) ledger.Store {
		s, err := boltstore.Open(b.TempDir()+"/ledger.db", boltstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"postgres", func(b *testing.B) ledger.Store {
		s, err := Open(b.Context(), pgtest.Database(b), Options{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
}

// benchLedger is ledgertest's benchmark ledger (as boltstore's own
// benchmarks use it) on a fresh store.
func benchLedger(b *testing.B, open func(b *testing.B) ledger.Store) ledger.Store {
	b.Helper()
	return ledgertest.BenchLedger(b, open(b), t0)
}

// BenchmarkAcquireRelease: one grant and its release, two transactions,
// per op: a node's lease churn.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := benchLedger(b, be.open)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, _, err := s.Acquire(ctx, "agent", "node-a", 100, 0, 60e9, t0)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Release(ctx, l.ID, l.Token, 60, t0+1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExtend: one extension of a held lease per op (grow it by 100
// units, move its expiry): how a busy node keeps its lease, one
// transaction per renewal.
func BenchmarkExtend(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := benchLedger(b, be.open)
			ctx := context.Background()
			l, _, err := s.Acquire(ctx, "agent", "node-a", 100, 0, 60e9, t0)
			if err != nil {
				b.Fatal(err)
			}
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now += 1e6
				n, _, err := s.Extend(ctx, l.ID, l.Token, 100, 0, 60e9, now)
				if err != nil || n.ExpiresAt != now+60e9 {
					b.Fatalf("extend: %+v, %v", n, err)
				}
			}
		})
	}
}

// BenchmarkIngest256 and BenchmarkIngest4096 ingest batches of lease-usage
// events (one unit each, distinct ids growing with time, as the daemon
// sends them) against one lease: one transaction per batch.
func BenchmarkIngest256(b *testing.B)  { benchIngest(b, 256) }
func BenchmarkIngest4096(b *testing.B) { benchIngest(b, 4096) }

func benchIngest(b *testing.B, size int) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) { ledgertest.BenchIngest(b, benchLedger(b, be.open), size, t0) })
	}
}

// BenchmarkPostgresFloor measures what every PostgreSQL transaction pays
// at least, on this machine at this moment: a round trip (SELECT 1) and a
// durable commit (an autocommitted one-row UPDATE: one WAL flush). Quoted
// beside the numbers above, it says how much of them is the floor.
func BenchmarkPostgresFloor(b *testing.B) {
	s, err := Open(b.Context(), pgtest.Database(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	b.Run("roundtrip", func(b *testing.B) {
		var n int
		for b.Loop() {
			if err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("commit", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.pool.Exec(ctx, "UPDATE counters SET value = value + 1 WHERE name = 'audit'"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
