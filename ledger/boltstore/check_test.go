package boltstore

import (
	"context"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
)

// tamperedStore is a store with an org, a budget and a lease, whose
// records f then edits behind the store's back.
func tamperedStore(t *testing.T, f func(tx *bolt.Tx) error) *Store {
	t.Helper()
	ctx := context.Background()
	s := newStore(t, Options{})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetBudget(ctx, "org", ledger.Budget{Allowance: 50, Period: ledger.PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "org", "node-a", 20, 0, 60e9, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("untouched store: %v", err)
	}
	if err := s.db.Update(f); err != nil {
		t.Fatal(err)
	}
	return s
}

// editAccount rewrites the org's record.
func editAccount(edit func(a *ledger.Account)) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccounts)
		a, err := decodeAccount([]byte("org"), b.Get([]byte("org")))
		if err != nil {
			return err
		}
		edit(&a)
		return b.Put([]byte("org"), encodeAccount(&a))
	}
}

func TestCheckFindsTampering(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(tx *bolt.Tx) error
		want error
	}{
		{"unbalanced account", editAccount(func(a *ledger.Account) { a.TopUpLeft++ }), ledger.ErrNotConserved},
		{"outstanding without a lease", editAccount(func(a *ledger.Account) { a.Outstanding++; a.Deposited++ }), ledger.ErrNotConserved},
		{"lease over-used", func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketLeases)
			rec, err := decodeLease(1, b.Get(u64Key(1)))
			if err != nil {
				return err
			}
			rec.Used = rec.Granted + 1
			return b.Put(u64Key(1), encodeLease(&rec))
		}, ledger.ErrNotConserved},
		{"lease missing from the expiry index", func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketExpiry).Cursor()
			k, _ := c.First()
			return tx.Bucket(bucketExpiry).Delete(k)
		}, ErrCorrupt},
		{"stray expiry entry", func(tx *bolt.Tx) error { return tx.Bucket(bucketExpiry).Put(expiryKey(t0, 99), nil) }, ErrCorrupt},
		{"stray due entry", func(tx *bolt.Tx) error { return tx.Bucket(bucketDue).Put(dueKey(t0, "ghost"), nil) }, ErrCorrupt},
		{"undecodable account", func(tx *bolt.Tx) error { return tx.Bucket(bucketAccounts).Put([]byte("org"), []byte{recordV1, 0xff}) }, ErrCorrupt},
		{"stray key index entry", func(tx *bolt.Tx) error { return tx.Bucket(bucketKeyIndex).Put(pairKey("org", "ghost"), nil) }, ErrCorrupt},
		{"stray held entry", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketHeld).Put(append(heldPrefix("ghost"), u64Key(99)...), nil)
		}, ErrCorrupt},
		{"undecodable platform token", func(tx *bolt.Tx) error { return tx.Bucket(bucketTokens).Put([]byte("t"), []byte{0xff}) }, ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := tamperedStore(t, c.edit)
			if err := s.Check(context.Background()); !errors.Is(err, c.want) {
				t.Fatalf("Check = %v, want %v", err, c.want)
			}
		})
	}
}
