package txn

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Ingest implements ledger.Store: the whole batch is one transaction, and
// an error (overflow, storage) records nothing of it.
//
// Every event id is recorded with its verdict, Rejected ones included, so
// a retried event is Duplicate and is never re-evaluated: a verdict is
// final, which keeps ingest idempotent even where re-evaluation could
// differ (an account created later, for instance). An id seen before — in
// an earlier batch, earlier in this one, or in a batch another transaction
// is ingesting at the same moment — is Duplicate and changes nothing.
// Unknown accounts, unknown sources, zero units, and lease usage that does
// not match its lease or does not fit in it are Rejected (see
// ledger.Bill). Accepted events are kept per account for UsageOf.
func (s *Store) Ingest(ctx context.Context, events []ledger.Usage, now int64) ([]ledger.IngestResult, error) {
	results := make([]ledger.IngestResult, len(events))
	err := s.update(ctx, func(w *work) error {
		clear(results)
		fresh, err := claim(w.tx, events, results, now)
		if err != nil || len(fresh) == 0 {
			return err
		}
		if err := lockForIngest(w, events, fresh); err != nil {
			return err
		}
		var rejected [][16]byte
		var accepted []*ledger.Usage
		var totals usageTotals
		for _, i := range fresh {
			e := &events[i]
			r, err := ledger.Bill(w, e, now)
			if err != nil {
				return fmt.Errorf("usage event %x: %w", e.ID, err)
			}
			results[i] = r
			if r != ledger.Accepted {
				rejected = append(rejected, e.ID)
				continue
			}
			accepted = append(accepted, e)
			if err := totals.add(e.Account, e.Source, 1, e.Units); err != nil {
				return err
			}
		}
		if len(rejected) > 0 {
			if err := w.tx.RejectEvents(rejected); err != nil {
				return err
			}
		}
		if len(accepted) == 0 {
			return nil
		}
		return w.tx.RecordUsage(accepted, totals.list())
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// claim records the ids of events not seen before and returns their
// indexes, in batch order; every other event is marked Duplicate in
// results.
func claim(tx Tx, events []ledger.Usage, results []ledger.IngestResult, now int64) ([]int, error) {
	first := make(map[[16]byte]bool, len(events))
	ids := make([][16]byte, 0, len(events))
	at := make([]int, 0, len(events)) // the index of ids[j]
	for i := range events {
		if first[events[i].ID] {
			results[i] = ledger.Duplicate
			continue
		}
		first[events[i].ID] = true
		ids, at = append(ids, events[i].ID), append(at, i)
	}
	claimed, err := tx.ClaimEvents(ids, now)
	if err != nil {
		return nil, err
	}
	if len(claimed) != len(ids) {
		return nil, fmt.Errorf("%w: %d answers to a claim of %d event ids", ledger.ErrCorrupt, len(claimed), len(ids))
	}
	fresh := make([]int, 0, len(ids))
	for j, i := range at {
		if claimed[j] {
			fresh = append(fresh, i)
		} else {
			results[i] = ledger.Duplicate
		}
	}
	return fresh, nil
}

// lockForIngest locks the leases the fresh events bill (by id), then the
// ancestries of their accounts and of those leases' accounts (by id).
func lockForIngest(w *work, events []ledger.Usage, fresh []int) error {
	var leaseIDs []uint64
	var accounts []core.AccountID
	for _, i := range fresh {
		e := &events[i]
		if e.Account.Validate() != nil {
			continue // rejected without a look
		}
		accounts = append(accounts, e.Account)
		if e.Source == ledger.UsageLease {
			leaseIDs = append(leaseIDs, e.LeaseID)
		}
	}
	return lockLeasesAndAccounts(w, leaseIDs, accounts)
}

// lockLeasesAndAccounts locks the leases ids, then accounts and the
// accounts of those leases, with their ancestries.
func lockLeasesAndAccounts(w *work, leaseIDs []uint64, accounts []core.AccountID) error {
	if len(leaseIDs) > 0 {
		recs, err := w.lockLeases(leaseIDs)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			accounts = append(accounts, rec.Account)
		}
	}
	return w.lockAccounts(accounts...)
}

// Settle implements ledger.Store: the totals and the mark move in one
// transaction, so a settlement replayed after a crash finds the mark at its
// end and changes nothing. Lease totals take what ledger.SettleLeaseUnits
// allows, overage totals are billed up the ancestry (ledger.SettleOverage),
// and the billed events of the history go to the accounts' recent usage,
// not to the event ids (those are Ingest's).
func (s *Store) Settle(ctx context.Context, st ledger.Settlement, now int64) (ledger.SettleResult, error) {
	var res ledger.SettleResult
	if st.Node == "" || st.To <= st.From {
		return res, fmt.Errorf("%w: settlement of %q from %d to %d", ledger.ErrInvalid, st.Node, st.From, st.To)
	}
	if err := s.text("node", st.Node, MaxNameLen); err != nil {
		return res, err
	}
	err := s.update(ctx, func(w *work) error {
		res = ledger.SettleResult{}
		mark, err := w.tx.TakeMark(st.Node, now)
		switch {
		case err != nil:
			return err
		case mark >= st.To:
			res.Duplicate = true
			return nil
		case mark > st.From:
			return fmt.Errorf("%w: node %q is at %d, the settlement covers %d to %d", ledger.ErrMarkOverlap, st.Node, mark, st.From, st.To)
		}
		if err := lockForSettle(w, &st); err != nil {
			return err
		}
		if res, err = settle(w, &st, now); err != nil {
			return err
		}
		return w.tx.PutMark(st.Node, mark, st.To, now)
	})
	if err != nil {
		return ledger.SettleResult{}, err
	}
	return res, nil
}

// lockForSettle locks the leases the settlement bills (by id), then the
// ancestries of their accounts and of the overage's accounts (by id), as
// lockForIngest does: two nodes settling against the same accounts take
// their locks in one order.
func lockForSettle(w *work, st *ledger.Settlement) error {
	var leaseIDs []uint64
	var accounts []core.AccountID
	for _, l := range st.Leases {
		if l.Units > 0 {
			leaseIDs = append(leaseIDs, l.LeaseID)
		}
	}
	for _, o := range st.Overage {
		if o.Units > 0 {
			accounts = append(accounts, o.Account)
		}
	}
	return lockLeasesAndAccounts(w, leaseIDs, accounts)
}

// settle bills the settlement's totals under the locks and records the
// history and the totals of what it billed.
func settle(w *work, st *ledger.Settlement, now int64) (ledger.SettleResult, error) {
	res, leaseTook, overageTook, err := ledger.SettleTotals(w, st, now)
	if err != nil {
		return res, err
	}
	// The totals count units by what was billed and events by the billed
	// events of the history (none when it is not given).
	var totals usageTotals
	var history []*ledger.Usage
	err = ledger.BilledEvents(st, leaseTook, overageTook, func(u *ledger.Usage) error {
		c := *u
		history = append(history, &c)
		return totals.add(c.Account, c.Source, 1, 0)
	})
	if err != nil {
		return res, err
	}
	for i, l := range st.Leases {
		if err := totals.add(l.Account, ledger.UsageLease, 0, leaseTook[i]); err != nil {
			return res, err
		}
	}
	for i, o := range st.Overage {
		if err := totals.add(o.Account, ledger.UsageOverage, 0, overageTook[i]); err != nil {
			return res, err
		}
	}
	if len(history) == 0 && totals.empty() {
		return res, nil
	}
	return res, w.tx.RecordUsage(history, totals.list())
}

// usageTotals adds up UsageTotals by account and source.
type usageTotals struct{ by map[totalKey]*UsageTotal }

type totalKey struct {
	account core.AccountID
	source  ledger.UsageSource
}

func (t *usageTotals) add(account core.AccountID, source ledger.UsageSource, events uint64, units core.CostUnits) error {
	if t.by == nil {
		t.by = make(map[totalKey]*UsageTotal)
	}
	k := totalKey{account, source}
	u, ok := t.by[k]
	if !ok {
		u = &UsageTotal{Account: account, Source: source}
		t.by[k] = u
	}
	sum, err := u.Units.Add(units)
	if err != nil || u.Events == math.MaxUint64 {
		return fmt.Errorf("%w: usage totals of %s", ledger.ErrOverflow, account)
	}
	u.Units, u.Events = sum, u.Events+events
	return nil
}

func (t *usageTotals) empty() bool { return len(t.list()) == 0 }

// list returns the totals that billed something, by account and source.
func (t *usageTotals) list() []UsageTotal {
	var out []UsageTotal
	for _, k := range slices.SortedFunc(maps.Keys(t.by), func(a, b totalKey) int {
		return cmp.Or(cmp.Compare(a.account, b.account), cmp.Compare(a.source, b.source))
	}) {
		if u := t.by[k]; u.Units > 0 {
			out = append(out, *u)
		}
	}
	return out
}

// ForgetEvents implements ledger.Store: it drops the oldest ids first, in
// one transaction.
func (s *Store) ForgetEvents(ctx context.Context, before int64, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: limit %d", ledger.ErrInvalid, limit)
	}
	if before == math.MinInt64 {
		return 0, nil // nothing was ingested before the start of time
	}
	if idle, err := s.idle(ctx, DueEvents, before-1); idle {
		return 0, err
	}
	var n int
	err := s.update(ctx, func(w *work) error {
		var err error
		n, err = w.tx.ForgetEvents(before, limit)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
