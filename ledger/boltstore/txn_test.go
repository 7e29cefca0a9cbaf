package boltstore

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

var (
	t0  = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC).UnixNano()
	day = int64(24 * time.Hour)
)

// newStore opens a store on a fresh file, closed with the test.
func newStore(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "ledger.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// keys lists a bucket's keys.
func keys(t *testing.T, s *Store, bucket []byte) [][]byte {
	t.Helper()
	var out [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, _ []byte) error {
			out = append(out, slices.Clone(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestIndexesFollowTheRecords: the due index holds exactly the accounts
// with a budget period, keyed by their current PeriodEnd; the expiry index
// exactly the active leases.
func TestIndexesFollowTheRecords(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	for _, id := range []core.AccountID{"a", "b"} {
		if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: id}, t0); err != nil {
			t.Fatal(err)
		}
	}
	acct := must[ledger.Account](t)
	a := acct(s.SetBudget(ctx, "a", ledger.Budget{Allowance: 10, Period: ledger.PeriodDay}, t0))
	acct(s.SetBudget(ctx, "b", ledger.Budget{Allowance: 10, Period: ledger.PeriodMonth}, t0))
	due := func(want ...[]byte) {
		t.Helper()
		if got := keys(t, s, bucketDue); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("due index %x, want %x", got, want)
		}
	}
	b := acct(s.Account(ctx, "b"))
	due(dueKey(a.PeriodEnd, "a"), dueKey(b.PeriodEnd, "b"))
	if n, err := s.Rollover(ctx, a.PeriodEnd, 10); n != 1 || err != nil {
		t.Fatalf("rollover: %d, %v", n, err)
	}
	a = acct(s.Account(ctx, "a"))
	due(dueKey(a.PeriodEnd, "a"), dueKey(b.PeriodEnd, "b")) // the next day still ends before the month
	acct(s.SetBudget(ctx, "b", ledger.Budget{}, t0))
	due(dueKey(a.PeriodEnd, "a"))
	acct(s.SetStatus(ctx, "a", core.StatusClosed))
	due()

	if _, _, err := s.Deposit(ctx, "b", 100, "d", t0); err != nil {
		t.Fatal(err)
	}
	l1, _, err := s.Acquire(ctx, "b", "node-a", 10, 0, 60e9, t0)
	if err != nil {
		t.Fatal(err)
	}
	l2, _, err := s.Acquire(ctx, "b", "node-a", 10, 0, 30e9, t0)
	if err != nil {
		t.Fatal(err)
	}
	expiry := func(want ...[]byte) {
		t.Helper()
		if got := keys(t, s, bucketExpiry); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("expiry index %x, want %x", got, want)
		}
	}
	expiry(expiryKey(l2.ExpiresAt, l2.ID), expiryKey(l1.ExpiresAt, l1.ID))
	if err := s.Release(ctx, l2.ID, l2.Token, 10, t0); err != nil {
		t.Fatal(err)
	}
	expiry(expiryKey(l1.ExpiresAt, l1.ID))
	if n, err := s.Reclaim(ctx, l1.ExpiresAt, 0, 10); n != 1 || err != nil {
		t.Fatalf("reclaim: %d, %v", n, err)
	}
	expiry()
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
