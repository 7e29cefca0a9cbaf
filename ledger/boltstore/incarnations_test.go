package boltstore

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
)

// asSchema5 turns an open store's file back into what schema 5 wrote:
// leases without their grace (format 2), no incarnations, no held index.
func asSchema5(t *testing.T, s *Store) {
	t.Helper()
	err := s.db.Update(func(tx *bolt.Tx) error {
		leases := tx.Bucket(bucketLeases)
		var old [][2][]byte
		err := leases.ForEach(func(k, v []byte) error {
			rec, err := decodeLease(seqOf(k), v)
			if err != nil {
				return err
			}
			v5 := encodeLease(&rec)
			// The grace is the last field, a varint: drop it, and say format 2.
			_, n := binary.Varint(v5[len(v5)-1:])
			if n != 1 {
				t.Fatalf("grace %d does not take one byte", rec.Grace)
			}
			v5 = append([]byte{recordV2}, v5[1:len(v5)-1]...)
			old = append(old, [2][]byte{append([]byte(nil), k...), v5})
			return nil
		})
		if err != nil {
			return err
		}
		for _, kv := range old {
			if err := leases.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		for _, b := range [][]byte{bucketNodes, bucketHeld} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(5))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSchema5IsUpgradedWithIncarnations: a schema-5 file opens as schema
// 6 with every node that held a lease or an export mark registered as
// incarnation 1 of its id, without a grace, its leases keeping none, and
// the leases not released indexed by holder; Check passes.
func TestSchema5IsUpgradedWithIncarnations(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Deposit(ctx, "org", 1000, "d", t0); err != nil {
		t.Fatal(err)
	}
	var leases []ledger.Lease
	for _, holder := range []string{"node-a", "node-a", "node-b", ""} {
		l, _, err := s.Acquire(ctx, "org", holder, 10, 0, 60e9, t0)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := s.Release(ctx, leases[1].ID, leases[1].Token, 10, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, ledger.Settlement{Node: "node-c", From: 0, To: 3}, t0); err != nil {
		t.Fatal(err)
	}
	asSchema5(t, s)
	s.Close()
	if s, err = Open(path, Options{}); err != nil {
		t.Fatalf("opening schema 5: %v", err)
	}
	defer s.Close()
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	incs, err := s.Incarnations(ctx)
	want := []ledger.Incarnation{{Node: "node-a", Number: 1, Grace: ledger.NoGrace}, {Node: "node-b", Number: 1, Grace: ledger.NoGrace},
		{Node: "node-c", Number: 1, Grace: ledger.NoGrace}}
	if err != nil || !slices.Equal(incs, want) {
		t.Fatalf("incarnations %+v, %v; want %+v", incs, err, want)
	}
	for holder, ids := range map[string][]uint64{"node-a": {leases[0].ID}, "node-b": {leases[2].ID}, "": {leases[3].ID}} {
		got, err := s.LeasesOf(ctx, holder)
		if err != nil || len(got) != len(ids) || got[0].ID != ids[0] || got[0].Grace != ledger.NoGrace {
			t.Fatalf("leases of %q: %+v, %v; want %v", holder, got, err, ids)
		}
	}
	// The node comes back as incarnation 1, and its next lease keeps its grace.
	if i, err := s.Incarnate(ctx, "node-a", 1, 5e9, t0); err != nil || i.Number != 1 {
		t.Fatalf("node-a again: %+v, %v", i, err)
	}
	if l, _, err := s.Acquire(ctx, "org", "node-a", 10, 0, 60e9, t0); err != nil || l.Grace != 5e9 {
		t.Fatalf("a lease after the upgrade: %+v, %v", l, err)
	}
}
