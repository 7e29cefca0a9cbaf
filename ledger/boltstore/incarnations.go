package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
)

// Incarnations and the leases each holder answers for (schema 6):
//
//	nodes  node id → its current incarnation (number, grace, started at)
//	held   len(holder) ⧺ holder ⧺ lease id → nil: every lease that is not
//	       released (active, or forfeited and not restored), for LeasesOf
//
// The holder is length-prefixed, not separated by a zero byte: a holder is
// any string here, and one holder's entries must never be a prefix range of
// another's.

func encodeIncarnation(i *ledger.Incarnation) []byte {
	e := newEncoder(24)
	e.uint(i.Number)
	e.int(i.Grace)
	e.int(i.StartedAt)
	return e.b
}

func decodeIncarnation(node []byte, v []byte) (ledger.Incarnation, error) {
	d := newDecoder("incarnation", v)
	i := ledger.Incarnation{Node: string(node)}
	i.Number = d.uint()
	i.Grace = d.int()
	i.StartedAt = d.int()
	if err := d.done(); err != nil {
		return ledger.Incarnation{}, fmt.Errorf("node %q: %w", node, err)
	}
	if i.Number == 0 || i.Grace < ledger.NoGrace {
		return ledger.Incarnation{}, fmt.Errorf("%w: node %q: incarnation %d, grace %d", ErrCorrupt, node, i.Number, i.Grace)
	}
	return i, nil
}

// incarnation reads node's current incarnation; known is false if the
// ledger has none.
func (x *txn) incarnation(node string) (i ledger.Incarnation, known bool, err error) {
	v := x.bucket(bucketNodes).Get([]byte(node))
	if v == nil {
		return ledger.Incarnation{}, false, nil
	}
	i, err = decodeIncarnation([]byte(node), v)
	return i, err == nil, err
}

// graceOf is the grace a lease granted to holder keeps (ledger.GraceOf).
func (x *txn) graceOf(holder string) (int64, error) {
	node, _ := ledger.ParseHolder(holder)
	cur, known, err := x.incarnation(node)
	if err != nil {
		return 0, err
	}
	return ledger.GraceOf(holder, cur, known), nil
}

// Incarnate implements ledger.Store (see ledger.Incarnate).
func (s *Store) Incarnate(ctx context.Context, node string, spool uint64, grace, now int64) (inc ledger.Incarnation, err error) {
	if err := ledger.ValidateIncarnate(node, grace); err != nil {
		return ledger.Incarnation{}, err
	}
	err = s.update(ctx, func(x *txn) error {
		cur, known, err := x.incarnation(node)
		if err != nil {
			return err
		}
		if inc, err = ledger.Incarnate(cur, known, node, spool, grace, now); err != nil {
			return err
		}
		return x.bucket(bucketNodes).Put([]byte(node), encodeIncarnation(&inc))
	})
	if err != nil {
		return ledger.Incarnation{}, err
	}
	return inc, nil
}

// Incarnations implements ledger.Store.
func (s *Store) Incarnations(ctx context.Context) (out []ledger.Incarnation, err error) {
	err = s.view(ctx, func(x *txn) error {
		return x.bucket(bucketNodes).ForEach(func(k, v []byte) error {
			i, err := decodeIncarnation(k, v)
			out = append(out, i)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heldPrefix is the held index's key range of holder.
func heldPrefix(holder string) []byte {
	k := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(holder)+8), uint64(len(holder)))
	return append(k, holder...)
}

// leaseHeldKey indexes a lease that is not released under its holder.
func leaseHeldKey(rec *ledger.LeaseRecord) []byte {
	if rec.State == ledger.LeaseReleased {
		return nil
	}
	return binary.BigEndian.AppendUint64(heldPrefix(rec.Holder), rec.ID)
}

// LeasesOf implements ledger.Store: it reads holder's range of the held
// index, so its cost follows what the holder answers for, not the store's
// size.
func (s *Store) LeasesOf(ctx context.Context, holder string) (out []ledger.Lease, err error) {
	err = s.view(ctx, func(x *txn) error {
		prefix := heldPrefix(holder)
		c := x.bucket(bucketHeld).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: held index key %x", ErrCorrupt, k)
			}
			rec, err := x.lease(binary.BigEndian.Uint64(k[len(prefix):]))
			if err != nil {
				return fmt.Errorf("%w: held index names a lease it cannot read: %w", ErrCorrupt, err)
			}
			out = append(out, rec.Lease)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ledger.Lease) int { return cmpUint(a.ID, b.ID) })
	return out, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// migrateFrom5 builds what schema 6 added: the held index of every lease
// not released, and an incarnation 1 for every node the ledger knew — each
// export mark's node and each lease holder — so that the data directories
// that wrote them are that incarnation. They keep no grace until their
// next start (ledger.NoGrace).
func migrateFrom5(tx *bolt.Tx) error {
	held, err := tx.CreateBucketIfNotExists(bucketHeld)
	if err != nil {
		return err
	}
	nodes, err := tx.CreateBucketIfNotExists(bucketNodes)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	if leases := tx.Bucket(bucketLeases); leases != nil {
		err = leases.ForEach(func(k, v []byte) error {
			rec, err := decodeLease(seqOf(k), v)
			if err != nil {
				return err
			}
			if rec.Holder != "" {
				node, _ := ledger.ParseHolder(rec.Holder)
				known[node] = true
			}
			if hk := leaseHeldKey(&rec); hk != nil {
				return held.Put(hk, nil)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if marks := tx.Bucket(bucketMarks); marks != nil {
		err = marks.ForEach(func(k, _ []byte) error {
			node, _ := ledger.ParseHolder(string(k))
			known[node] = true
			return nil
		})
		if err != nil {
			return err
		}
	}
	for node := range known {
		if ledger.ValidateIncarnate(node, 0) != nil || nodes.Get([]byte(node)) != nil {
			continue
		}
		i := ledger.Incarnation{Node: node, Number: 1, Grace: ledger.NoGrace}
		if err := nodes.Put([]byte(node), encodeIncarnation(&i)); err != nil {
			return err
		}
	}
	return nil
}

// checkHeld verifies that the held index names exactly the leases that are
// not released, and that every incarnation decodes.
func checkHeld(x *txn, notReleased map[string]bool) error {
	n := 0
	err := x.bucket(bucketHeld).ForEach(func(k, _ []byte) error {
		if !notReleased[string(k)] {
			return fmt.Errorf("%w: held index entry %x names no lease that is not released", ErrCorrupt, k)
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if n != len(notReleased) {
		return fmt.Errorf("%w: held index has %d entries for %d leases not released", ErrCorrupt, n, len(notReleased))
	}
	return x.bucket(bucketNodes).ForEach(func(k, v []byte) error {
		_, err := decodeIncarnation(k, v)
		return err
	})
}
