package boltstore

import (
	"context"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// TestKeysOfAnAccountUseTheIndex: one account's keys are read through the
// account index, so an index entry without its key is reported, not
// skipped.
func TestKeysOfAnAccountUseTheIndex(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	for _, id := range []string{"org", "org2"} {
		if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: core.AccountID(id)}, t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []ledger.Key{{ID: "b", Account: "org"}, {ID: "a", Account: "org"}, {ID: "c", Account: "org2"}} {
		if err := s.AddKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Keys(ctx, "org")
	if err != nil || len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" {
		t.Fatalf("keys of org: %+v, %v", got, err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketKeys).Delete([]byte("a")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Keys(ctx, "org"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("dangling index entry: %v", err)
	}
	if got, err := s.Keys(ctx, "org2"); err != nil || len(got) != 1 {
		t.Fatalf("keys of org2: %+v, %v", got, err)
	}
}

// TestAdminDigestIsStoredOnce: concurrent bootstraps agree on one digest.
func TestAdminDigestIsStoredOnce(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	stored := make(chan bool, 8)
	for i := range 8 {
		go func() {
			ok, err := s.SetAdminTokenDigest(ctx, [32]byte{byte(i)})
			if err != nil {
				t.Error(err)
			}
			stored <- ok
		}()
	}
	wins := 0
	for range 8 {
		if <-stored {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d digests stored", wins)
	}
}
