package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Check implements ledger.Store: it streams every lease and then every
// account through ledger.Conservation (L1–L5; a violation wraps
// ledger.ErrNotConserved), and checks that its indexes hold exactly the
// entries the records imply (a mismatch wraps ErrCorrupt), keys and admin
// tokens included. It reads one
// consistent snapshot and runs beside writers.
func (b *backend) Check(ctx context.Context) error {
	return b.view(ctx, func(x *boltTx) error {
		c := ledger.NewConservation()
		expiry := x.bucket(bucketExpiry)
		active := 0
		notReleased := map[string]bool{}
		err := x.bucket(bucketLeases).ForEach(func(k, v []byte) error {
			rec, err := decodeLease(seqOf(k), v)
			if err != nil {
				return err
			}
			if err := c.Lease(&rec); err != nil {
				return err
			}
			if hk := leaseHeldKey(&rec); hk != nil {
				notReleased[string(hk)] = true
			}
			if ek := leaseExpiryKey(&rec); ek != nil {
				active++
				if expiry.Get(ek) == nil {
					return fmt.Errorf("%w: active lease %d is missing from the expiry index", ErrCorrupt, rec.ID)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if n := expiry.Stats().KeyN; n != active {
			return fmt.Errorf("%w: expiry index has %d entries for %d active leases", ErrCorrupt, n, active)
		}
		if err := checkHeld(x, notReleased); err != nil {
			return err
		}
		due := x.bucket(bucketDue)
		budgeted := 0
		withParent := make(map[string]core.AccountID)
		err = x.bucket(bucketAccounts).ForEach(func(k, v []byte) error {
			a, err := decodeAccount(k, v)
			if err != nil {
				return err
			}
			if a.Parent != "" {
				withParent[string(a.ID)] = a.Parent
			}
			if err := c.Account(&a); err != nil {
				return err
			}
			if dk := accountDueKey(&a); dk != nil {
				budgeted++
				if due.Get(dk) == nil {
					return fmt.Errorf("%w: account %s is missing from the due index", ErrCorrupt, a.ID)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if n := due.Stats().KeyN; n != budgeted {
			return fmt.Errorf("%w: due index has %d entries for %d accounts with a period", ErrCorrupt, n, budgeted)
		}
		if err := checkChildren(x, withParent); err != nil {
			return err
		}
		if err := checkEventAges(x); err != nil {
			return err
		}
		if err := checkKeys(x); err != nil {
			return err
		}
		return c.Done()
	})
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

// checkKeys verifies that every key and admin token decodes and that the
// key expiry index names exactly the live keys with an expiry.
func checkKeys(x *boltTx) error {
	index := x.bucket(bucketKeyExp)
	expiring := 0
	err := x.bucket(bucketKeys).ForEach(func(id, v []byte) error {
		k, err := decodeKey(id, v)
		if err != nil {
			return err
		}
		if ek := keyExpiryKey(&k); ek != nil {
			expiring++
			if index.Get(ek) == nil {
				return fmt.Errorf("%w: key %s expiring at %d is missing from the key expiry index", ErrCorrupt, k.ID, k.ExpiresAt)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n := index.Stats().KeyN; n != expiring {
		return fmt.Errorf("%w: key expiry index has %d entries for %d expiring keys", ErrCorrupt, n, expiring)
	}
	return x.bucket(bucketAdmins).ForEach(func(id, v []byte) error {
		_, err := decodeAdminToken(id, v)
		return err
	})
}

// checkChildren verifies that the children index names exactly the
// accounts that have a parent, under that parent.
func checkChildren(x *boltTx, withParent map[string]core.AccountID) error {
	n := 0
	err := x.bucket(bucketChildren).ForEach(func(k, _ []byte) error {
		i := bytes.IndexByte(k, 0)
		if i < 0 || withParent[string(k[i+1:])] != core.AccountID(k[:i]) {
			return fmt.Errorf("%w: children entry %q matches no account's parent", ErrCorrupt, k)
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if n != len(withParent) {
		return fmt.Errorf("%w: children index has %d entries for %d accounts with a parent", ErrCorrupt, n, len(withParent))
	}
	return nil
}

// checkHeld verifies that the held index names exactly the leases that are
// not released, and that every incarnation decodes.
func checkHeld(x *boltTx, notReleased map[string]bool) error {
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
