package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

func TestOpenRefusesBadOptionsAndOtherSchemas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if _, err := Open(path, Options{UsageHistory: -1}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("negative history: %v", err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put(metaSchema, u64Key(schemaVersion+1))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "schema") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("other schema: %v", err)
	}
}

// TestCanceledContextChangesNothing: a call whose context is already done
// returns its error without a transaction.
func TestCanceledContextChangesNothing(t *testing.T) {
	s := newStore(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); !errors.Is(err, context.Canceled) {
		t.Fatalf("create: %v", err)
	}
	if _, err := s.Account(context.Background(), "org"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("account after a canceled create: %v", err)
	}
	if _, err := s.Accounts(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("accounts: %v", err)
	}
}

// TestRolloverReadsOnlyDueAccounts: the due index is ordered by period
// end, so a rollover stops at the first account that is not due.
func TestRolloverReadsOnlyDueAccounts(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	for id, p := range map[core.AccountID]ledger.Period{"a0": ledger.PeriodDay, "a1": ledger.PeriodWeek, "a2": ledger.PeriodMonth} {
		if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: id}, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetBudget(ctx, id, ledger.Budget{Allowance: 1, Period: p}, t0); err != nil {
			t.Fatal(err)
		}
	}
	// Corrupt the monthly account: a rollover that read it would fail.
	err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAccounts).Put([]byte("a2"), []byte{0}) })
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Rollover(ctx, t0+7*day, 10); n != 2 || err != nil {
		t.Fatalf("rollover: %d, %v", n, err)
	}
}
