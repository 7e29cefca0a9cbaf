package boltstore

import (
	"context"
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
		var leaseTook, overageTook []core.CostUnits
		var err error
		if res, leaseTook, overageTook, err = ledger.SettleTotals(x, &st, now); err != nil {
			return err
		}
		var runs usageRuns
		err = ledger.BilledEvents(&st, leaseTook, overageTook, func(u *ledger.Usage) error {
			runs.add(u)
			return nil
		})
		if err != nil {
			return err
		}
		if err := x.keepUsage(&runs, s.history); err != nil {
			return err
		}
		return marks.Put([]byte(st.Node), u64Key(st.To))
	})
	if err != nil {
		return ledger.SettleResult{}, err
	}
	return res, nil
}

// ExportMark implements ledger.Store.
func (s *Store) ExportMark(ctx context.Context, node string) (mark uint64, err error) {
	err = s.view(ctx, func(x *txn) error {
		mark = seqOf(x.bucket(bucketMarks).Get([]byte(node)))
		return nil
	})
	return mark, err
}
