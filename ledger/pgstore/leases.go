package pgstore

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// lockLeaseSQL locks one lease.
const lockLeaseSQL = "SELECT " + leaseColumns + " FROM leases WHERE id = $1 FOR UPDATE"

// Acquire implements ledger.Store (see ledger.Acquire). A refusal is a
// *ledger.Refusal and changes nothing; the evidence is returned either way.
// The holder is stored as text: at most 256 bytes of UTF-8 without NUL
// bytes, else ErrInvalid.
func (s *Store) Acquire(ctx context.Context, id core.AccountID, holder string, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence, error) {
	if err := ledger.ValidateGrant(want, ttl, now); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	if err := validLabel("lease holder", holder); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	var rec ledger.LeaseRecord
	var ev ledger.Evidence
	err := s.update(ctx, func(x *txn) error {
		if err := x.lockAccounts([]core.AccountID{id}); err != nil {
			return err
		}
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

// lockLease locks lease id and then its account's ancestry, in the lock
// order (leases before accounts).
func (x *txn) lockLease(id uint64) (*ledger.LeaseRecord, ledger.Ancestry, error) {
	if id > math.MaxInt64 {
		return nil, nil, fmt.Errorf("%w: lease %d", ledger.ErrNotFound, id)
	}
	recs, err := x.lockLeases(lockLeaseSQL, int64(id))
	if err != nil {
		return nil, nil, err
	}
	if len(recs) == 0 {
		return nil, nil, fmt.Errorf("%w: lease %d", ledger.ErrNotFound, id)
	}
	rec := recs[0]
	if err := x.lockAccounts([]core.AccountID{rec.Account}); err != nil {
		return nil, nil, err
	}
	an, err := x.ancestry(rec.Account)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: account of lease %d: %w", ErrCorrupt, id, err)
	}
	return rec, an, nil
}

// Extend implements ledger.Store (see ledger.Extend). A refusal or an
// ended period changes nothing; the evidence is returned either way.
func (s *Store) Extend(ctx context.Context, leaseID, token uint64, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence, error) {
	if err := ledger.ValidateExtend(ttl, now); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	var out ledger.Lease
	var ev ledger.Evidence
	err := s.update(ctx, func(x *txn) error {
		ev = ledger.Evidence{}
		rec, an, err := x.lockLease(leaseID)
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
		rec, _, err := x.lockLease(leaseID)
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

// reclaimSQL locks up to $3 active leases past their ReclaimableAt — their
// own grace, or $2 for those that keep none — at $1, earliest first. Every
// lease is reclaimable at its expiry or later, so the partial index of
// active leases by expiry bounds what it reads; the sum is numeric, so it
// cannot overflow.
const reclaimSQL = "SELECT " + leaseColumns + ` FROM leases
	WHERE state = 1 AND expires_at <= $1
		AND expires_at::numeric + CASE WHEN grace >= 0 THEN grace ELSE $2 END <= $1
	ORDER BY expires_at::numeric + CASE WHEN grace >= 0 THEN grace ELSE $2 END, id
	LIMIT $3 FOR UPDATE SKIP LOCKED`

// Reclaim implements ledger.Store. It locks up to limit due leases,
// skipping those another transaction holds (another node's reclaim, or
// their holder's late release), then their accounts, and forfeits each:
// every node may reclaim at once, and no lease is reclaimed twice.
func (s *Store) Reclaim(ctx context.Context, now, grace int64, limit int) (n int, err error) {
	if grace < 0 || limit <= 0 {
		return 0, fmt.Errorf("%w: reclaim grace %d, limit %d", ledger.ErrInvalid, grace, limit)
	}
	err = s.update(ctx, func(x *txn) error {
		n = 0
		due, err := x.lockLeases(reclaimSQL, now, grace, limit)
		if err != nil || len(due) == 0 {
			return err
		}
		accounts := make([]core.AccountID, len(due))
		for i, rec := range due {
			accounts[i] = rec.Account
		}
		if err := x.lockAccounts(accounts); err != nil {
			return err
		}
		for _, rec := range due {
			funders, err := x.funders(rec)
			if err != nil {
				return err
			}
			if err := ledger.Forfeit(rec, funders); err != nil {
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

// Leases implements ledger.Store: every lease, or only the active ones, in
// id order.
func (s *Store) Leases(ctx context.Context, active bool) ([]ledger.Lease, error) {
	query := "SELECT " + leaseColumns + " FROM leases ORDER BY id"
	if active { // through the partial index of active leases: ended ones pile up
		query = "SELECT " + leaseColumns + " FROM leases WHERE state = 1 ORDER BY id"
	}
	rows, err := s.pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Lease, error) {
		rec, err := scanLease(row)
		return rec.Lease, err
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}
