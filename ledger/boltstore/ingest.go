package boltstore

import (
	"context"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Ingest implements ledger.Store: the whole batch is one transaction, and
// an error (overflow, storage) records nothing of it.
//
// Every event id is recorded with its verdict, Rejected ones included, so
// a retried event is Duplicate and is never re-evaluated: a verdict is
// final, which keeps ingest idempotent even where re-evaluation could
// differ (an account created later, for instance). An id seen before, in
// an earlier batch or earlier in this one, is Duplicate and changes
// nothing. Unknown accounts, unknown sources, zero units, and lease usage
// that does not match its lease or does not fit in it are Rejected (see
// ledger.SettleLease). Accepted events are kept per account for UsageOf.
func (s *Store) Ingest(ctx context.Context, events []ledger.Usage, now int64) ([]ledger.IngestResult, error) {
	results := make([]ledger.IngestResult, len(events))
	err := s.update(ctx, func(x *txn) error {
		seen := x.bucket(bucketEvents)
		age := x.bucket(bucketEventAge)
		var runs usageRuns
		for i := range events {
			e := &events[i]
			if seen.Get(e.ID[:]) != nil {
				results[i] = ledger.Duplicate
				continue
			}
			r, err := ledger.Bill(x, e, now)
			if err != nil {
				return fmt.Errorf("usage event %x: %w", e.ID, err)
			}
			results[i] = r
			if err := seen.Put(e.ID[:], []byte{byte(r)}); err != nil {
				return err
			}
			if err := age.Put(eventAgeKey(now, e.ID), nil); err != nil {
				return err
			}
			if r == ledger.Accepted {
				runs.add(e)
			}
		}
		return x.keepUsage(&runs, s.history)
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// Ancestry and LeaseFunders make a transaction the ledger's Books.
func (x *txn) Ancestry(id core.AccountID) (ledger.Ancestry, error) { return x.ancestry(id) }

func (x *txn) LeaseFunders(id uint64) (*ledger.LeaseRecord, []*ledger.Account, error) {
	rec, err := x.lease(id)
	if err != nil {
		return nil, nil, err
	}
	funders, err := x.funders(rec)
	return rec, funders, err
}

// UsageOf implements ledger.Store: id's most recent accepted usage, newest
// first, at most limit (and at most Options.UsageHistory) events.
func (s *Store) UsageOf(ctx context.Context, id core.AccountID, limit int) (out []ledger.Usage, err error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: usage limit %d", ledger.ErrInvalid, limit)
	}
	err = s.view(ctx, func(x *txn) error {
		if _, err := x.account(id); err != nil {
			return err
		}
		b := x.bucket(bucketUsage).Bucket([]byte(id))
		if b == nil {
			return nil
		}
		return eachUsageBack(b, s.history, 0, func(_ uint64, u ledger.Usage) bool {
			out = append(out, u)
			return len(out) < limit
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
