package boltstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Settle implements ledger.Store: the totals and the mark move in one
// transaction, so a settlement replayed after a crash finds the mark at its
// end and changes nothing.
func (s *Store) Settle(ctx context.Context, st ledger.Settlement, now int64) (ledger.SettleResult, error) {
	var res ledger.SettleResult
	if st.Node == "" || st.To <= st.From {
		return res, fmt.Errorf("%w: settlement of %q from %d to %d", ledger.ErrInvalid, st.Node, st.From, st.To)
	}
	err := s.update(ctx, func(x *txn) error {
		res = ledger.SettleResult{}
		marks := x.bucket(bucketMarks)
		mark := seqOf(marks.Get([]byte(st.Node)))
		switch {
		case mark >= st.To:
			res.Duplicate = true
			return nil
		case mark > st.From:
			return fmt.Errorf("%w: node %q is at %d, the settlement covers %d to %d", ledger.ErrMarkOverlap, st.Node, mark, st.From, st.To)
		}
		leaseTook := make([]core.CostUnits, len(st.Leases))
		for i := range st.Leases {
			took, err := x.settleLease(&st.Leases[i])
			if err != nil {
				return err
			}
			leaseTook[i] = took
			if err := res.Add(took, st.Leases[i].Units-took); err != nil {
				return err
			}
		}
		overageTook := make([]core.CostUnits, len(st.Overage))
		for i := range st.Overage {
			u := &st.Overage[i]
			an, err := x.ancestry(u.Account)
			if errors.Is(err, ledger.ErrNotFound) || u.Units == 0 {
				if err := res.Add(0, u.Units); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			if err := ledger.SettleOverage(an.Chain(), u.Units, now); err != nil {
				return fmt.Errorf("overage of %s: %w", u.Account, err)
			}
			overageTook[i] = u.Units
			if err := res.Add(u.Units, 0); err != nil {
				return err
			}
		}
		err := ledger.BilledEvents(&st, leaseTook, overageTook, func(u *ledger.Usage) error {
			return x.recordUsage(u, s.history)
		})
		if err != nil {
			return err
		}
		return marks.Put([]byte(st.Node), u64Key(st.To))
	})
	if err != nil {
		return ledger.SettleResult{}, err
	}
	return res, nil
}

// settleLease bills one lease's total, reporting the units it took.
func (x *txn) settleLease(u *ledger.LeaseUsage) (core.CostUnits, error) {
	rec, err := x.lease(u.LeaseID)
	if errors.Is(err, ledger.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	funders, err := x.funders(rec)
	if err != nil {
		return 0, err
	}
	took, err := ledger.SettleLeaseUnits(rec, funders, u)
	if err != nil {
		return 0, fmt.Errorf("usage of lease %d: %w", u.LeaseID, err)
	}
	return took, nil
}

// ExportMark implements ledger.Store.
func (s *Store) ExportMark(ctx context.Context, node string) (mark uint64, err error) {
	err = s.view(ctx, func(x *txn) error {
		mark = seqOf(x.bucket(bucketMarks).Get([]byte(node)))
		return nil
	})
	return mark, err
}
