package boltstore

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// TestFileFromBeforeTheChildrenIndexIsIndexedOnOpen: a ledger written
// before the children index gets it when opened.
func TestFileFromBeforeTheChildrenIndexIsIndexedOnOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []ledger.AccountSpec{{ID: "org"}, {ID: "ws", Parent: "org", Unmetered: true}, {ID: "a1", Parent: "ws"}, {ID: "a2", Parent: "ws"}} {
		if _, _, err := s.CreateAccount(ctx, spec, t0); err != nil {
			t.Fatal(err)
		}
	}
	s = reopenWithout(t, s, path, bucketChildren)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Children(ctx, "ws"); err != nil || !reflect.DeepEqual(got, []core.AccountID{"a1", "a2"}) {
		t.Fatalf("children of ws: %v, %v", got, err)
	}
}

// TestCheckFindsAWrongChildrenEntry shows the index check can fail.
func TestCheckFindsAWrongChildrenEntry(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	for _, spec := range []ledger.AccountSpec{{ID: "org"}, {ID: "other"}, {ID: "ws", Parent: "org", Unmetered: true}} {
		if _, _, err := s.CreateAccount(ctx, spec, t0); err != nil {
			t.Fatal(err)
		}
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChildren)
		if err := b.Delete(childKey("org", "ws")); err != nil {
			return err
		}
		return b.Put(childKey("other", "ws"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check passed with ws indexed under the wrong parent")
	}
}
