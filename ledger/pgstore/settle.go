package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Settlement statements. A settlement is four round trips whatever its
// size: take the node's mark, lock the leases, lock the accounts, then the
// write-back (accounts, leases, history, totals and the new mark).
const (
	// takeMarkSQL locks node's mark row, creating it at 0 if the node never
	// settled, and returns the mark. The row is the first lock a
	// settlement takes (the lock order's head, before leases): a node's
	// settlements run one at a time, other nodes' never wait for it.
	takeMarkSQL = `INSERT INTO export_marks AS m (node, mark, settled_at) VALUES ($1, 0, $2)
		ON CONFLICT (node) DO UPDATE SET node = m.node
		RETURNING mark`
	moveMarkSQL = `UPDATE export_marks SET mark = $2, settled_at = $3 WHERE node = $1 AND mark = $4`
)

// Settle implements ledger.Store: the totals and the mark move in one
// transaction, so a settlement replayed after a crash finds the mark at its
// end and changes nothing. Lease totals take what ledger.SettleLeaseUnits
// allows, overage totals are billed up the ancestry (ledger.SettleOverage),
// and the billed events of the history go to the accounts' recent usage,
// not to the event-id index (that one is for Ingest's post-paid reports).
func (s *Store) Settle(ctx context.Context, st ledger.Settlement, now int64) (ledger.SettleResult, error) {
	var res ledger.SettleResult
	if st.Node == "" || st.To <= st.From {
		return res, fmt.Errorf("%w: settlement of %q from %d to %d", ledger.ErrInvalid, st.Node, st.From, st.To)
	}
	if err := validName("node", st.Node); err != nil {
		return res, err
	}
	if st.To > math.MaxInt64 {
		return res, fmt.Errorf("%w: export mark %d exceeds the 2^63-1 a PostgreSQL bigint holds", ledger.ErrOverflow, st.To)
	}
	err := s.update(ctx, func(x *txn) error {
		res = ledger.SettleResult{}
		var mark int64
		if err := x.tx.QueryRow(ctx, takeMarkSQL, st.Node, now).Scan(&mark); err != nil {
			return err
		}
		switch {
		case mark < 0:
			return fmt.Errorf("%w: export mark %d of node %q", ErrCorrupt, mark, st.Node)
		case uint64(mark) >= st.To:
			res.Duplicate = true
			return nil
		case uint64(mark) > st.From:
			return fmt.Errorf("%w: node %q is at %d, the settlement covers %d to %d", ledger.ErrMarkOverlap, st.Node, mark, st.From, st.To)
		}
		if err := x.lockForSettle(&st); err != nil {
			return err
		}
		var err error
		if res, err = x.settle(&st, now, s.history); err != nil {
			return err
		}
		x.queue(moveMarkSQL, affects("moving the export mark", 1), st.Node, int64(st.To), now, mark)
		return nil
	})
	if err != nil {
		return ledger.SettleResult{}, err
	}
	return res, nil
}

// lockForSettle locks the leases the settlement bills (by id), then the
// ancestries of their accounts and of the overage's accounts (by id), as
// lockForIngest does: two nodes settling against the same accounts take
// their locks in one order and cannot deadlock.
func (x *txn) lockForSettle(st *ledger.Settlement) error {
	var leaseIDs []int64
	accounts := make(map[core.AccountID]bool)
	for i := range st.Leases {
		if id := st.Leases[i].LeaseID; id <= math.MaxInt64 && st.Leases[i].Units > 0 {
			leaseIDs = append(leaseIDs, int64(id))
		}
	}
	if len(leaseIDs) > 0 {
		slices.Sort(leaseIDs)
		recs, err := x.lockLeases(lockLeasesSQL, slices.Compact(leaseIDs))
		if err != nil {
			return err
		}
		for _, rec := range recs {
			accounts[rec.Account] = true
		}
	}
	for i := range st.Overage {
		if st.Overage[i].Units > 0 {
			accounts[st.Overage[i].Account] = true
		}
	}
	return x.lockAccounts(slices.Sorted(maps.Keys(accounts)))
}

// settle bills the settlement's totals under the locks (boltstore's rule
// for rule) and queues the usage totals and the history of what it billed.
func (x *txn) settle(st *ledger.Settlement, now int64, history int64) (ledger.SettleResult, error) {
	var totals usageTotals
	res, leaseTook, overageTook, err := ledger.SettleTotals(x, st, now)
	if err != nil {
		return res, err
	}
	// The usage totals count units by what was billed and events by the
	// billed events of the history (none when it is not given).
	billed := make(map[totalKey]uint64)
	var events []*ledger.Usage
	err = ledger.BilledEvents(st, leaseTook, overageTook, func(u *ledger.Usage) error {
		c := *u
		events = append(events, &c)
		billed[totalKey{c.Account, c.Source}]++
		return nil
	})
	if err != nil {
		return res, err
	}
	took := make(map[totalKey]core.CostUnits)
	add := func(k totalKey, units core.CostUnits) error {
		sum, err := took[k].Add(units)
		took[k] = sum
		return err
	}
	for i := range st.Leases {
		if err := add(totalKey{st.Leases[i].Account, ledger.UsageLease}, leaseTook[i]); err != nil {
			return res, err
		}
	}
	for i := range st.Overage {
		if err := add(totalKey{st.Overage[i].Account, ledger.UsageOverage}, overageTook[i]); err != nil {
			return res, err
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(took), totalKey.compare) {
		if took[k] > 0 {
			totals.add(k.account, k.source, billed[k], took[k])
		}
	}
	if err := totals.queue(x); err != nil {
		return res, err
	}
	return res, queueHistory(x, events, history)
}

// totalKey names one row of the usage totals.
type totalKey struct {
	account core.AccountID
	source  ledger.UsageSource
}

func (k totalKey) compare(o totalKey) int {
	if k.account != o.account {
		if k.account < o.account {
			return -1
		}
		return 1
	}
	return int(k.source) - int(o.source)
}

// ExportMark implements ledger.Store.
func (s *Store) ExportMark(ctx context.Context, node string) (mark uint64, err error) {
	if validName("node", node) != nil {
		return 0, nil // no settlement can have stored it
	}
	err = s.view(ctx, func(tx pgx.Tx) error {
		var m int64
		err := tx.QueryRow(ctx, "SELECT mark FROM export_marks WHERE node = $1", node).Scan(&m)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			mark = 0
			return nil
		case err != nil:
			return err
		case m < 0:
			return fmt.Errorf("%w: export mark %d of node %q", ErrCorrupt, m, node)
		}
		mark = uint64(m)
		return nil
	})
	return mark, err
}
