package boltstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Acquire implements ledger.Store (see ledger.Acquire). A refusal is a
// *ledger.Refusal and changes nothing; the evidence is returned either way.
func (s *Store) Acquire(ctx context.Context, id core.AccountID, holder string, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence, error) {
	if err := ledger.ValidateGrant(want, ttl, now); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	var rec ledger.LeaseRecord
	var ev ledger.Evidence
	err := s.update(ctx, func(x *txn) error {
		an, err := x.ancestry(id)
		if err != nil {
			return err
		}
		leaseID, err := x.nextLeaseID()
		if err != nil {
			return err
		}
		if rec, ev, err = ledger.Acquire(an, leaseID, holder, want, need, ttl, now); err != nil {
			return err
		}
		if rec.Grace, err = x.graceOf(holder); err != nil {
			return err
		}
		x.insertLease(rec)
		return nil
	})
	if err != nil {
		return ledger.Lease{}, ev, err
	}
	return rec.Lease, ev, nil
}

// Extend implements ledger.Store (see ledger.Extend). A refusal or an
// ended period changes nothing.
func (s *Store) Extend(ctx context.Context, leaseID, token uint64, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence, error) {
	if err := ledger.ValidateExtend(ttl, now); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	var out ledger.Lease
	var ev ledger.Evidence
	err := s.update(ctx, func(x *txn) error {
		rec, err := x.lease(leaseID)
		if err != nil {
			return err
		}
		an, err := x.ancestry(rec.Account)
		if err != nil {
			return err
		}
		if ev, err = ledger.Extend(rec, an, token, want, need, ttl, now); err != nil {
			return err
		}
		out = rec.Lease
		return nil
	})
	if err != nil {
		return ledger.Lease{}, ev, err
	}
	return out, ev, nil
}

// Release implements ledger.Store (see ledger.Release).
func (s *Store) Release(ctx context.Context, leaseID, token uint64, unspent core.CostUnits, now int64) error {
	return s.update(ctx, func(x *txn) error {
		rec, err := x.lease(leaseID)
		if err != nil {
			return err
		}
		funders, err := x.funders(rec)
		if err != nil {
			return err
		}
		return ledger.Release(rec, funders, token, unspent, now)
	})
}

// Reclaim implements ledger.Store. It walks the expiry index (active leases
// by ExpiresAt, then id) from the oldest up to now, so it reads only leases
// that have expired, and forfeits those past their ReclaimableAt — their
// own grace, or grace for those that keep none — earliest first.
func (s *Store) Reclaim(ctx context.Context, now, grace int64, limit int) (n int, err error) {
	if grace < 0 || limit <= 0 {
		return 0, fmt.Errorf("%w: reclaim grace %d, limit %d", ledger.ErrInvalid, grace, limit)
	}
	// Every lease is reclaimable at its expiry or later (graces are not
	// negative): nothing is due while the oldest expiry is still ahead.
	if due, err := s.due(ctx, bucketExpiry, now); !due || err != nil {
		return 0, err
	}
	err = s.update(ctx, func(x *txn) error {
		type dueLease struct {
			rec *ledger.LeaseRecord
			at  int64
		}
		var due []dueLease
		c := x.bucket(bucketExpiry).Cursor()
		for k, _ := c.First(); k != nil && keyTime(k) <= now; k, _ = c.Next() {
			if len(k) != 16 {
				return fmt.Errorf("%w: expiry index key %x", ErrCorrupt, k)
			}
			id := seqOf(k[8:])
			rec, err := x.lease(id)
			if err != nil {
				return fmt.Errorf("%w: expiry index names lease %d: %w", ErrCorrupt, id, err)
			}
			if at, ok := ledger.ReclaimableAt(&rec.Lease, grace); ok && at <= now {
				due = append(due, dueLease{rec, at})
			}
		}
		slices.SortFunc(due, func(a, b dueLease) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.rec.ID, b.rec.ID))
		})
		due = due[:min(limit, len(due))]
		for _, d := range due {
			funders, err := x.funders(d.rec)
			if err != nil {
				return err
			}
			if err := ledger.Forfeit(d.rec, funders); err != nil {
				return err
			}
		}
		n = len(due)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Leases implements ledger.Store: every lease, or only the active ones
// (read through the expiry index), in id order.
func (s *Store) Leases(ctx context.Context, active bool) (out []ledger.Lease, err error) {
	err = s.view(ctx, func(x *txn) error {
		if !active {
			return x.bucket(bucketLeases).ForEach(func(k, v []byte) error {
				rec, err := decodeLease(seqOf(k), v)
				out = append(out, rec.Lease)
				return err
			})
		}
		var ids []uint64
		err := x.bucket(bucketExpiry).ForEach(func(k, _ []byte) error {
			ids = append(ids, seqOf(k[8:]))
			return nil
		})
		if err != nil {
			return err
		}
		slices.Sort(ids)
		for _, id := range ids {
			rec, err := x.lease(id)
			if err != nil {
				return err
			}
			out = append(out, rec.Lease)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// seqOf reads a u64Key (0 if k is not one; sequences start at 1).
func seqOf(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}
