package txn

import (
	"context"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Acquire implements ledger.Store (see ledger.Acquire). A refusal is a
// *ledger.Refusal and changes nothing; the evidence is returned either way.
func (s *Store) Acquire(ctx context.Context, id core.AccountID, holder string, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence, error) {
	if err := ledger.ValidateGrant(want, ttl, now); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	if err := s.text("lease holder", holder, MaxNameLen); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	var rec ledger.LeaseRecord
	var ev ledger.Evidence
	err := s.update(ctx, func(w *work) error {
		if err := w.lockAccounts(id); err != nil {
			return err
		}
		an, err := w.ancestry(id)
		if err != nil {
			return err
		}
		leaseID, err := w.tx.NextLeaseID()
		if err != nil {
			return err
		}
		if rec, ev, err = ledger.Acquire(an, leaseID, holder, want, need, ttl, now); err != nil {
			return err
		}
		if rec.Grace, err = graceOf(w.tx, holder); err != nil {
			return err
		}
		w.insertLease(rec)
		return nil
	})
	if err != nil {
		return ledger.Lease{}, ev, err
	}
	return rec.Lease, ev, nil
}

// graceOf is the grace a lease granted to holder keeps (ledger.GraceOf),
// read without a lock: grants to one node do not wait for each other.
func graceOf(tx Tx, holder string) (int64, error) {
	node, _ := ledger.ParseHolder(holder)
	cur, known, err := tx.Incarnation(node, false)
	if err != nil {
		return 0, err
	}
	return ledger.GraceOf(holder, cur, known), nil
}

// Extend implements ledger.Store (see ledger.Extend). A refusal or an
// ended period changes nothing; the evidence is returned either way.
func (s *Store) Extend(ctx context.Context, leaseID, token uint64, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence, error) {
	if err := ledger.ValidateExtend(ttl, now); err != nil {
		return ledger.Lease{}, ledger.Evidence{}, err
	}
	var out ledger.Lease
	var ev ledger.Evidence
	err := s.update(ctx, func(w *work) error {
		ev = ledger.Evidence{}
		rec, an, err := w.lockLease(leaseID)
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
	return s.update(ctx, func(w *work) error {
		rec, _, err := w.lockLease(leaseID)
		if err != nil {
			return err
		}
		funders, err := w.funders(rec)
		if err != nil {
			return err
		}
		return ledger.Release(rec, funders, token, unspent, now)
	})
}

// Reclaim implements ledger.Store. It locks the due leases, then their
// accounts, and forfeits each: a lease that another transaction reclaimed
// is no longer active, so none is reclaimed twice.
func (s *Store) Reclaim(ctx context.Context, now, grace int64, limit int) (n int, err error) {
	if grace < 0 || limit <= 0 {
		return 0, fmt.Errorf("%w: reclaim grace %d, limit %d", ledger.ErrInvalid, grace, limit)
	}
	// Every lease is reclaimable at its expiry or later (graces are not
	// negative): nothing is due while the oldest expiry is still ahead.
	if idle, err := s.idle(ctx, DueReclaim, now); idle {
		return 0, err
	}
	err = s.update(ctx, func(w *work) error {
		n = 0
		recs, err := w.tx.DueLeases(now, grace, limit)
		if err != nil || len(recs) == 0 {
			return err
		}
		due := w.holdLeases(recs)
		accounts := make([]core.AccountID, len(due))
		for i, rec := range due {
			accounts[i] = rec.Account
		}
		if err := w.lockAccounts(accounts...); err != nil {
			return err
		}
		for _, rec := range due {
			funders, err := w.funders(rec)
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

// Incarnate implements ledger.Store (see ledger.Incarnate): the node's
// record is locked, so two starts of one id decide one after the other.
func (s *Store) Incarnate(ctx context.Context, node string, spool uint64, grace, now int64) (inc ledger.Incarnation, err error) {
	if err := ledger.ValidateIncarnate(node, grace); err != nil {
		return ledger.Incarnation{}, err
	}
	if err := s.text("node", node, MaxNameLen); err != nil {
		return ledger.Incarnation{}, err
	}
	err = s.update(ctx, func(w *work) error {
		cur, known, err := w.tx.Incarnation(node, true)
		if err != nil {
			return err
		}
		if inc, err = ledger.Incarnate(cur, known, node, spool, grace, now); err != nil {
			return err
		}
		return w.tx.PutIncarnation(&inc)
	})
	if err != nil {
		return ledger.Incarnation{}, err
	}
	return inc, nil
}
