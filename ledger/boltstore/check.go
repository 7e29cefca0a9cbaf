package boltstore

import (
	"context"
	"fmt"

	"github.com/tollgated/tollgated/ledger"
)

// Check implements ledger.Store: it streams every lease and then every
// account through ledger.Conservation (L1–L5; a violation wraps
// ledger.ErrNotConserved), and checks that each index holds exactly the
// entries the records imply (a mismatch wraps ErrCorrupt), and that every
// key, token and incarnation decodes. It reads one consistent snapshot and
// runs beside writers.
func (b *backend) Check(ctx context.Context) error {
	return b.view(ctx, func(x *boltTx) error {
		indexes := [][]byte{bucketExpiry, bucketHeld, bucketDue, bucketChildren, bucketKeyExp, bucketKeyIndex}
		want := make(map[string]map[string]bool, len(indexes)) // index → the entries the records imply
		for _, index := range indexes {
			want[string(index)] = make(map[string]bool)
		}
		imply := func(index, entry []byte) {
			if entry != nil {
				want[string(index)][string(entry)] = true
			}
		}
		err := ledger.CheckConservation(func(lease func(*ledger.LeaseRecord) error) error {
			return each(x, bucketLeases, func(k, v []byte) (ledger.LeaseRecord, error) { return decodeLease(seqOf(k), v) },
				func(rec *ledger.LeaseRecord) error {
					imply(bucketExpiry, leaseExpiryKey(rec))
					imply(bucketHeld, leaseHeldKey(rec))
					return lease(rec)
				})
		}, func(account func(*ledger.Account) error) error {
			return each(x, bucketAccounts, decodeAccount, func(a *ledger.Account) error {
				imply(bucketDue, accountDueKey(a))
				if a.Parent != "" {
					imply(bucketChildren, childKey(a.Parent, a.ID))
				}
				return account(a)
			})
		})
		if err != nil {
			return err
		}
		err = each(x, bucketKeys, decodeKey, func(k *ledger.Key) error {
			imply(bucketKeyExp, keyExpiryKey(k))
			imply(bucketKeyIndex, pairKey(k.Account, k.ID))
			return nil
		})
		if err != nil {
			return err
		}
		for _, index := range indexes {
			if err := holdsExactly(x, index, want[string(index)]); err != nil {
				return err
			}
		}
		if err := checkEventAges(x); err != nil {
			return err
		}
		if err := each(x, bucketAdmins, decodeAdminToken, nil); err != nil {
			return err
		}
		if err := each(x, bucketTokens, decodePlatformToken, nil); err != nil {
			return err
		}
		return each(x, bucketNodes, decodeIncarnation, nil)
	})
}

// each decodes every record of bucket and passes it to fn (if not nil).
func each[T any](x *boltTx, bucket []byte, decode func(k, v []byte) (T, error), fn func(*T) error) error {
	return x.bucket(bucket).ForEach(func(k, v []byte) error {
		rec, err := decode(k, v)
		if err != nil || fn == nil {
			return err
		}
		return fn(&rec)
	})
}

// holdsExactly checks that index has exactly the entries want.
func holdsExactly(x *boltTx, index []byte, want map[string]bool) error {
	n := 0
	err := x.bucket(index).ForEach(func(k, _ []byte) error {
		if !want[string(k)] {
			return fmt.Errorf("%w: %s index entry %x names no record that implies it", ErrCorrupt, index, k)
		}
		n++
		return nil
	})
	if err == nil && n != len(want) {
		err = fmt.Errorf("%w: %s index has %d entries, the records imply %d", ErrCorrupt, index, n, len(want))
	}
	return err
}

// checkEventAges verifies that the ingest-time index names every remembered
// event id exactly once and nothing else.
func checkEventAges(x *boltTx) error {
	seen := x.bucket(bucketEvents)
	indexed := make(map[[16]byte]bool)
	err := x.bucket(bucketEventAge).ForEach(func(k, _ []byte) error {
		if len(k) != 8+16 || seen.Get(k[8:]) == nil {
			return fmt.Errorf("%w: event-age entry %x names no remembered event", ErrCorrupt, k)
		}
		id := [16]byte(k[8:])
		if indexed[id] {
			return fmt.Errorf("%w: event %x is in the event-age index twice", ErrCorrupt, id)
		}
		indexed[id] = true
		return nil
	})
	if err != nil {
		return err
	}
	if n := seen.Stats().KeyN; n != len(indexed) {
		return fmt.Errorf("%w: event-age index has %d entries for %d remembered events", ErrCorrupt, len(indexed), n)
	}
	return nil
}
