package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/ledgertest"
	"github.com/tollgated/tollgated/ledger"
)

// encodeSchema2Key is a key as schema 2 wrote it.
func encodeSchema2Key(k *ledger.Key) []byte {
	e := newEncoder(48)
	e.string(string(k.Account))
	e.digest(k.Digest)
	e.int(k.CreatedAt)
	e.bool(k.Revoked)
	return e.b
}

// TestSchema2FileIsUpgraded: a file a schema-2 build wrote (keys in its
// layout, the admin digest in meta) opens with every key as it was, the
// digest as the bootstrap admin token, and passes Check; a schema-2 build
// would then refuse it (it is marked with the current schema).
func TestSchema2FileIsUpgraded(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	keys := []ledger.Key{
		{ID: "k1", Account: "org", Digest: [32]byte{1}, CreatedAt: t0},
		{ID: "k2", Account: "org", Digest: [32]byte{2}, CreatedAt: t0 + 1, Revoked: true},
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketKeyExp, bucketAdmins} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		for _, k := range keys {
			if err := tx.Bucket(bucketKeys).Put([]byte(k.ID), encodeSchema2Key(&k)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketKeyIndex).Put(pairKey(k.Account, k.ID), nil); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if err := meta.Put(metaAdmin, make([]byte, 32)); err != nil {
			return err
		}
		return meta.Put(metaSchema, u64Key(2))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Keys(ctx, "org"); err != nil || !reflect.DeepEqual(got, keys) {
		t.Fatalf("keys after the upgrade: %+v, %v", got, err)
	}
	admins, err := s.AdminTokens(ctx)
	want := []ledger.AdminToken{{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Role: ledger.RoleAdmin}}
	if err != nil || !reflect.DeepEqual(admins, want) {
		t.Fatalf("admin tokens after the upgrade: %+v, %v", admins, err)
	}
	if d, ok, err := s.AdminTokenDigest(ctx); !ok || err != nil || d != ([32]byte{}) {
		t.Fatalf("bootstrap digest: %x %v %v", d, ok, err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	var schema []byte
	s.db.View(func(tx *bolt.Tx) error {
		schema = tx.Bucket(bucketMeta).Get(metaSchema)
		if tx.Bucket(bucketMeta).Get(metaAdmin) != nil {
			t.Error("the schema-2 admin digest is still in meta")
		}
		return nil
	})
	if string(schema) != string(u64Key(schemaVersion)) {
		t.Fatalf("schema %x", schema)
	}
}

// TestCheckFindsAWrongKeyExpiryEntry: an expiring key missing from the
// index, or an index entry for a key that no longer expires, is reported.
func TestCheckFindsAWrongKeyExpiryEntry(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	k := ledger.Key{ID: "k", Account: "org", ExpiresAt: t0 + 1}
	if err := s.AddKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	for name, tamper := range map[string]func(tx *bolt.Tx) error{
		"missing": func(tx *bolt.Tx) error { return tx.Bucket(bucketKeyExp).Delete(keyExpiryKey(&k)) },
		"extra": func(tx *bolt.Tx) error {
			other := k
			other.ID = "ghost"
			return tx.Bucket(bucketKeyExp).Put(keyExpiryKey(&other), nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			snapshot := keys(t, s, bucketKeyExp)
			if err := s.db.Update(tamper); err != nil {
				t.Fatal(err)
			}
			if err := s.Check(ctx); err == nil {
				t.Fatal("Check passed")
			}
			s.db.Update(func(tx *bolt.Tx) error { // restore
				tx.DeleteBucket(bucketKeyExp)
				b, _ := tx.CreateBucket(bucketKeyExp)
				for _, k := range snapshot {
					b.Put(k, nil)
				}
				return nil
			})
		})
	}
}

// TestExpireKeysWritesNothingWhenNothingIsDue: the sweep runs every second
// from the admin API; with nothing due it must not commit (and fsync).
func TestExpireKeysWritesNothingWhenNothingIsDue(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddKey(ctx, ledger.Key{ID: "k", Account: "org", ExpiresAt: t0 + 10}); err != nil {
		t.Fatal(err)
	}
	txid := func() (id int) {
		s.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	before := txid()
	if got, err := s.ExpireKeys(ctx, t0, 10); err != nil || len(got) != 0 {
		t.Fatalf("expire: %+v, %v", got, err)
	}
	if after := txid(); after != before {
		t.Fatalf("an idle sweep committed %d write transactions", after-before)
	}
	if got, err := s.ExpireKeys(ctx, t0+10, 10); err != nil || len(got) != 1 || txid() == before {
		t.Fatalf("a due sweep: %+v, %v", got, err)
	}
}

// TestFilteredPagesReadABoundedNumberOfAccounts: ledgertest's
// BoundedAccountPages, on more accounts than a page reads.
func TestFilteredPagesReadABoundedNumberOfAccounts(t *testing.T) {
	s := newStore(t, Options{})
	n := ledger.MaxPageScan + ledger.MaxPageScan/2
	err := s.db.Update(func(tx *bolt.Tx) error {
		for i := range n {
			a, err := ledger.NewAccount(ledger.AccountSpec{ID: core.AccountID(fmt.Sprintf("acct-%05d", i))}, nil)
			if err != nil {
				return err
			}
			if i == n-2 {
				a.Status = core.StatusSuspended
			}
			if err := tx.Bucket(bucketAccounts).Put([]byte(a.ID), encodeAccount(&a)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.BoundedAccountPages(t, s, n)
}

// TestLeaseCursorAtTheLastIDEndsTheListing: the next id after it would
// wrap to 0 and list everything again.
func TestLeaseCursorAtTheLastIDEndsTheListing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Deposit(ctx, "org", 10, "d", t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "org", "node-a", 5, 1, 60e9, t0); err != nil {
		t.Fatal(err)
	}
	for _, active := range []bool{false, true} {
		got, next, err := s.ListLeases(ctx, active, ledger.Page{After: "18446744073709551615", Limit: 10})
		if err != nil || len(got) != 0 || next != "" {
			t.Fatalf("active %v: %+v %q %v", active, got, next, err)
		}
	}
}

// TestSchema6AdminTokensBecomeAdmins: admin tokens a schema-6 build wrote
// (no role: each could do everything) open as admins, the file is marked
// with the current schema so that a schema-6 build refuses it, and a token
// added afterwards keeps its role.
func TestSchema6AdminTokensBecomeAdmins(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	schema6 := func(name string, d [32]byte, created int64, revoked bool) []byte {
		e := newEncoder(48)
		e.string(name)
		e.digest(d)
		e.int(created)
		e.bool(revoked)
		return e.b
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		admins := tx.Bucket(bucketAdmins)
		if err := admins.Put([]byte(ledger.BootstrapAdminTokenID), schema6(ledger.BootstrapAdminTokenID, [32]byte{1}, 0, false)); err != nil {
			return err
		}
		if err := admins.Put([]byte("atk_ops"), schema6("ops", [32]byte{2}, t0, true)); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(6))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	viewer := ledger.AdminToken{ID: "atk_view", Name: "grafana", Digest: [32]byte{3}, CreatedAt: t0 + 1, Role: ledger.RoleViewer}
	if err := s.AddAdminToken(ctx, viewer); err != nil {
		t.Fatal(err)
	}
	want := []ledger.AdminToken{
		{ID: "atk_ops", Name: "ops", Digest: [32]byte{2}, CreatedAt: t0, Revoked: true, Role: ledger.RoleAdmin},
		viewer,
		{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: [32]byte{1}, Role: ledger.RoleAdmin},
	}
	if got, err := s.AdminTokens(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("admin tokens after the upgrade: %+v, %v\nwant %+v", got, err, want)
	}
	var schema []byte
	s.db.View(func(tx *bolt.Tx) error {
		schema = bytes.Clone(tx.Bucket(bucketMeta).Get(metaSchema))
		return nil
	})
	if string(schema) != string(u64Key(schemaVersion)) || schemaVersion != 7 {
		t.Fatalf("schema %x after the upgrade, this build's %d", schema, schemaVersion)
	}
}
