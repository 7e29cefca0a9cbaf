package boltstore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// TestFileFromBeforeTheAgeIndexIsIndexedOnOpen: a ledger written before
// event ids had an ingest-time index gets one when opened, dated at the
// opening, so its ids are forgotten one retention after the upgrade, not
// never, and Check holds throughout.
func TestFileFromBeforeTheAgeIndexIsIndexedOnOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	events := []ledger.Usage{
		{ID: [16]byte{1}, Account: "org", Source: ledger.UsageOverage, Units: 1},
		{ID: [16]byte{2}, Account: "org", Source: ledger.UsageOverage, Units: 1},
	}
	if _, err := s.Ingest(ctx, events, t0); err != nil {
		t.Fatal(err)
	}
	opened := time.Now().UnixNano()
	s = reopenWithout(t, s, path, bucketEventAge)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ForgetEvents(ctx, opened-1, 10); n != 0 || err != nil {
		t.Fatalf("forgot %d (%v) ids dated before the opening", n, err)
	}
	if res, _ := s.Ingest(ctx, events, t0); res[0] != ledger.Duplicate || res[1] != ledger.Duplicate {
		t.Fatalf("remembered ids: %v", res)
	}
	if n, err := s.ForgetEvents(ctx, time.Now().UnixNano()+1, 10); n != 2 || err != nil {
		t.Fatalf("forgot %d (%v), want the 2 indexed at the opening", n, err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCheckFindsAnEventMissingFromTheAgeIndex shows the index check can fail.
func TestCheckFindsAnEventMissingFromTheAgeIndex(t *testing.T) {
	ctx := context.Background()
	s := storeWithOneEvent(t)
	err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketEventAge).Delete(eventAgeKey(t0, [16]byte{1})) })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check passed with an event missing from the age index")
	}
}

// TestIdlePassesWriteNothing: reclaim, rollover and forgetting with nothing
// due commit no write transaction (each commit is an fsync, and an idle
// node runs them every second).
func TestIdlePassesWriteNothing(t *testing.T) {
	ctx := context.Background()
	s := storeWithOneEvent(t)
	txid := func() (id int) {
		s.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	before := txid()
	if n, err := s.ForgetEvents(ctx, t0, 10); n != 0 || err != nil {
		t.Fatal(n, err)
	}
	if n, err := s.Reclaim(ctx, t0, 0, 10); n != 0 || err != nil {
		t.Fatal(n, err)
	}
	if n, err := s.Rollover(ctx, t0, 10); n != 0 || err != nil {
		t.Fatal(n, err)
	}
	if after := txid(); after != before {
		t.Fatalf("idle passes committed %d write transactions", after-before)
	}
	if n, err := s.ForgetEvents(ctx, t0+1, 10); n != 1 || err != nil {
		t.Fatalf("forgetting what is due: %d, %v", n, err)
	}
	if txid() == before {
		t.Fatal("a pass with work committed nothing")
	}
}

// storeWithOneEvent is a store holding account org and one ingested event
// (id 1, at t0).
func storeWithOneEvent(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s := newStore(t, Options{})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ingest(ctx, []ledger.Usage{{ID: [16]byte{1}, Account: "org", Source: ledger.UsageOverage, Units: 1}}, t0); err != nil {
		t.Fatal(err)
	}
	return s
}

// reopenWithout closes s, turns its file into what a schema-1 build would
// have left (without bucket, marked schema 1), and opens it again.
func reopenWithout(t *testing.T, s *Store, path string, bucket []byte) *Store {
	t.Helper()
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucket); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(1))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSchemaIsUpgradedOnceAndNewerIsRefused: opening a schema-1 file marks
// it schema 2; a file of a schema this build does not know is refused.
func TestSchemaIsUpgradedOnceAndNewerIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s = reopenWithout(t, s, path, bucketChildren)
	schema := func() (v []byte) {
		s.db.View(func(tx *bolt.Tx) error { v = tx.Bucket(bucketMeta).Get(metaSchema); return nil })
		return v
	}
	if string(schema()) != string(u64Key(schemaVersion)) {
		t.Fatalf("schema after the upgrade: %x", schema())
	}
	s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(schemaVersion+1)) })
	s.Close()
	if _, err := Open(path, Options{}); err == nil {
		t.Fatal("opened a file of a newer schema")
	}
}

// TestCheckFindsAnEventIndexedTwice: one id indexed twice and another not
// at all keeps the counts equal; Check must still see it.
func TestCheckFindsAnEventIndexedTwice(t *testing.T) {
	ctx := context.Background()
	s := storeWithOneEvent(t)
	if _, err := s.Ingest(ctx, []ledger.Usage{{ID: [16]byte{2}, Account: "org", Source: ledger.UsageOverage, Units: 1}}, t0); err != nil {
		t.Fatal(err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEventAge)
		if err := b.Delete(eventAgeKey(t0, [16]byte{2})); err != nil {
			return err
		}
		return b.Put(eventAgeKey(t0+1, [16]byte{1}), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check passed with an id indexed twice and another missing")
	}
}

// TestSchema3DebtIsRepaidOnUpgrade: schema 2 let an account owe overage
// while it held a balance; opening such a file repays the debt from the
// balance, so L1's new clause holds for every account afterwards.
func TestSchema3DebtIsRepaidOnUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	// What a schema-2 build wrote: a V1 record owing 30 beside a balance of 50.
	old := ledger.Account{AccountSpec: ledger.AccountSpec{ID: "org"}, Scope: core.ScopeOrg, PolicyGeneration: 1, NextToken: 1,
		Deposited: 100, Overage: 30, TopUpLeft: 50, Settled: 80}
	v := encodeAccount(&old)
	v = v[:len(v)-1] // drop Repaid (0: one byte)
	v[0] = recordV1
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketAccounts).Put([]byte("org"), v); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(3))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Account(context.Background(), "org")
	if err != nil {
		t.Fatal(err)
	}
	if a.Overage != 0 || a.TopUpLeft != 20 || a.Repaid != 30 || a.Conserved() != nil {
		t.Fatalf("after the upgrade: %+v", a)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}
