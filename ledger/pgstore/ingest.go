package pgstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Ingest statements. The batch travels as arrays, so a batch of any size
// is a fixed number of statements: claim the ids, lock the leases, lock
// the accounts, then one round trip that writes back the records, the
// verdicts, the usage history and the usage totals.
const (
	// claimEventsSQL records every id not seen before, in id order (the
	// lock order between two batches sharing ids), and returns those it
	// recorded. A batch that meets an id another transaction is recording
	// waits for it, then sees it: an id is claimed by one batch only.
	claimEventsSQL = `INSERT INTO events (id, ingested_at, verdict)
		SELECT id, $2, 1 FROM unnest($1::bytea[]) AS id ORDER BY id
		ON CONFLICT (id) DO NOTHING RETURNING id`
	lockLeasesSQL  = "SELECT " + leaseColumns + " FROM leases WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
	rejectSQL      = `UPDATE events SET verdict = 3 WHERE id = ANY($1::bytea[])`
	recordUsageSQL = `INSERT INTO usage (account, event_id, source, lease_id, token, units, occurred_at)
		SELECT account, event_id, source, lease_id, token, units, occurred_at
		FROM unnest($1::text[], $2::bytea[], $3::smallint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
			WITH ORDINALITY AS u(account, event_id, source, lease_id, token, units, occurred_at, n)
		ORDER BY n`
	// trimUsageSQL keeps the last $2 accepted events of each account of $1.
	trimUsageSQL = `DELETE FROM usage AS u USING (
			SELECT a.account, (SELECT seq FROM usage WHERE account = a.account ORDER BY seq DESC OFFSET $2 LIMIT 1) AS cut
			FROM unnest($1::text[]) AS a(account)) AS c
		WHERE u.account = c.account AND u.seq <= c.cut`
	addTotalsSQL = `INSERT INTO usage_totals (account, source, events, units)
		SELECT account, source, sum(events), sum(units)
		FROM unnest($1::text[], $2::smallint[], $3::bigint[], $4::bigint[]) AS u(account, source, events, units)
		GROUP BY account, source
		ON CONFLICT (account, source) DO UPDATE
		SET events = usage_totals.events + excluded.events, units = usage_totals.units + excluded.units`
)

// Ingest implements ledger.Store: the whole batch is one transaction, and
// an error (overflow, storage) records nothing of it.
//
// Every event id is recorded with its verdict, Rejected ones included, so
// a retried event is Duplicate and is never re-evaluated: a verdict is
// final. An id seen before — in an earlier batch, earlier in this batch,
// or in a batch another node is ingesting at the same moment — is
// Duplicate and changes nothing. Unknown accounts, unknown sources, zero
// units, and lease usage that does not match its lease or does not fit in
// it are Rejected (see ledger.SettleLease). Accepted events are kept per
// account for UsageOf and counted in the usage totals the reconciliation
// query checks Settled against.
func (s *Store) Ingest(ctx context.Context, events []ledger.Usage, now int64) ([]ledger.IngestResult, error) {
	results := make([]ledger.IngestResult, len(events))
	err := s.update(ctx, func(x *txn) error {
		clear(results)
		fresh, err := x.claim(events, results, now)
		if err != nil || len(fresh) == 0 {
			return err
		}
		if err := x.lockForIngest(events, fresh); err != nil {
			return err
		}
		var w ingestWrites
		for _, i := range fresh {
			e := &events[i]
			r, err := ledger.Bill(x, e, now)
			if err != nil {
				return fmt.Errorf("usage event %x: %w", e.ID, err)
			}
			results[i] = r
			w.add(e, r)
		}
		return w.queue(x, s.history)
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// claim records the ids of events not seen before and returns their
// indexes, in batch order; every other event is marked Duplicate in
// results.
func (x *txn) claim(events []ledger.Usage, results []ledger.IngestResult, now int64) ([]int, error) {
	first := make(map[[16]byte]int, len(events)) // id → index of its first occurrence
	ids := make([][]byte, 0, len(events))
	for i := range events {
		if _, seen := first[events[i].ID]; seen {
			results[i] = ledger.Duplicate
			continue
		}
		first[events[i].ID] = i
		ids = append(ids, events[i].ID[:])
	}
	rows, err := x.tx.Query(x.ctx, claimEventsSQL, ids, now)
	if err != nil {
		return nil, err
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, err
	}
	fresh := make([]int, 0, len(claimed))
	for _, id := range claimed {
		if len(id) != 16 {
			return nil, fmt.Errorf("%w: event id of %d bytes", ErrCorrupt, len(id))
		}
		fresh = append(fresh, first[[16]byte(id)])
	}
	slices.Sort(fresh)
	isFresh := make(map[int]bool, len(fresh))
	for _, i := range fresh {
		isFresh[i] = true
	}
	for _, i := range first {
		if !isFresh[i] {
			results[i] = ledger.Duplicate
		}
	}
	return fresh, nil
}

// lockForIngest locks the leases the fresh events bill (by id), then the
// ancestries of their accounts and of those leases' accounts (by id).
// Ids that cannot name a row (an invalid account id, a lease id beyond
// bigint) are left out: their events are rejected without a query.
func (x *txn) lockForIngest(events []ledger.Usage, fresh []int) error {
	var leaseIDs []int64
	accounts := make(map[core.AccountID]bool)
	for _, i := range fresh {
		e := &events[i]
		if e.Account.Validate() != nil {
			continue
		}
		accounts[e.Account] = true
		if e.Source == ledger.UsageLease && e.LeaseID <= math.MaxInt64 {
			leaseIDs = append(leaseIDs, int64(e.LeaseID))
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
	return x.lockAccounts(slices.Sorted(maps.Keys(accounts)))
}

// Ancestry and LeaseFunders make a transaction the ledger's Books (under
// the batch's locks). A lease whose account is missing is corruption.
func (x *txn) Ancestry(id core.AccountID) (ledger.Ancestry, error) { return x.ancestry(id) }

func (x *txn) LeaseFunders(id uint64) (*ledger.LeaseRecord, []*ledger.Account, error) {
	rec, err := x.lease(id)
	if err != nil {
		return nil, nil, err
	}
	if _, err := x.account(rec.Account); err != nil {
		// Not ErrNotFound: the rules would take a missing account for a
		// lease that does not exist, and reject instead of stopping.
		return nil, nil, fmt.Errorf("%w: lease %d of %s: %v", ErrCorrupt, rec.ID, rec.Account, err)
	}
	funders, err := x.funders(rec)
	return rec, funders, err
}

// ingestWrites gathers a batch's writes beyond the records.
type ingestWrites struct {
	rejected [][]byte
	accepted []*ledger.Usage
}

func (w *ingestWrites) add(e *ledger.Usage, r ledger.IngestResult) {
	if r == ledger.Accepted {
		w.accepted = append(w.accepted, e)
	} else {
		w.rejected = append(w.rejected, e.ID[:])
	}
}

// queue adds the writes to the transaction's write-back, as columns: the
// rejections' verdicts, every accepted event's units to the usage totals,
// and the usage history.
func (w *ingestWrites) queue(x *txn, history int64) error {
	if len(w.rejected) > 0 {
		x.queue(rejectSQL, affects("recording rejections", len(w.rejected)), w.rejected)
	}
	if len(w.accepted) == 0 {
		return nil
	}
	var t usageTotals
	for _, e := range w.accepted {
		t.add(e.Account, e.Source, 1, e.Units)
	}
	if err := t.queue(x); err != nil {
		return err
	}
	return queueHistory(x, w.accepted, history)
}

// usageTotals gathers additions to the usage totals, as columns.
type usageTotals struct {
	w        writer
	accounts []string
	sources  []int16
	events   []int64
	units    []int64
}

func (t *usageTotals) add(account core.AccountID, source ledger.UsageSource, events uint64, units core.CostUnits) {
	t.accounts, t.sources = append(t.accounts, string(account)), append(t.sources, int16(source))
	t.events, t.units = append(t.events, t.w.int("events", events)), append(t.units, t.w.units("usage", units))
}

// queue adds the totals to the write-back, if there are any.
func (t *usageTotals) queue(x *txn) error {
	if t.w.err != nil || len(t.accounts) == 0 {
		return t.w.err
	}
	x.queue(addTotalsSQL, nil, t.accounts, t.sources, t.events, t.units)
	return nil
}

// queueHistory adds events to their accounts' recent usage (UsageOf) and
// trims each account to its last history events. Of an account's events
// only its last history ones are inserted: the older ones would be trimmed
// at once.
func queueHistory(x *txn, events []*ledger.Usage, history int64) error {
	if len(events) == 0 {
		return nil
	}
	var wr writer
	var kept struct {
		accounts       []string
		ids            [][]byte
		sources        []int16
		leases, tokens []int64
		units, at      []int64
	}
	// An account's first older events of the batch are not kept.
	older := make(map[core.AccountID]int64)
	for _, e := range events {
		older[e.Account]++
	}
	accounts := make([]string, 0, len(older))
	for id, n := range older {
		older[id] = n - history
		accounts = append(accounts, string(id))
	}
	for _, e := range events {
		if older[e.Account] > 0 {
			older[e.Account]--
			continue
		}
		kept.accounts, kept.ids, kept.sources = append(kept.accounts, string(e.Account)), append(kept.ids, e.ID[:]), append(kept.sources, int16(e.Source))
		// Kept bit for bit: for overage and post-paid usage they are
		// whatever the event carried.
		kept.leases, kept.tokens = append(kept.leases, int64(e.LeaseID)), append(kept.tokens, int64(e.Token))
		kept.units, kept.at = append(kept.units, wr.units("usage", e.Units)), append(kept.at, e.OccurredAt)
	}
	if wr.err != nil {
		return wr.err
	}
	slices.Sort(accounts)
	x.queue(recordUsageSQL, affects("recording usage", len(kept.ids)), kept.accounts, kept.ids, kept.sources, kept.leases, kept.tokens, kept.units, kept.at)
	x.queue(trimUsageSQL, nil, accounts, history)
	return nil
}

// ForgetEvents implements ledger.Store: it deletes up to limit ids
// ingested before before, oldest first, skipping ids another transaction
// holds (another node forgetting, or a batch claiming them), so every node
// may run it at once.
func (s *Store) ForgetEvents(ctx context.Context, before int64, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: limit %d", ledger.ErrInvalid, limit)
	}
	var n int
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, `WITH doomed AS (
				SELECT id FROM events WHERE ingested_at < $1 ORDER BY ingested_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
			DELETE FROM events AS e USING doomed WHERE e.id = doomed.id`, before, limit)
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// UsageOf implements ledger.Store: id's most recent accepted usage, newest
// first, at most limit (and at most Options.UsageHistory) events.
func (s *Store) UsageOf(ctx context.Context, id core.AccountID, limit int) (out []ledger.Usage, err error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: usage limit %d", ledger.ErrInvalid, limit)
	}
	err = s.view(ctx, func(tx pgx.Tx) error {
		if _, err := readAccount(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT "+usageColumns+" FROM usage WHERE account = $1 ORDER BY seq DESC LIMIT $2",
			string(id), min(int64(limit), s.history))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Usage, error) { return scanUsage(row, id, nil) })
		return err
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

const usageColumns = "event_id, source, lease_id, token, units, occurred_at"

// scanUsage reads one row of usageColumns of account id, preceded by the
// row's sequence number (into seq) if seq is not nil.
func scanUsage(row pgx.Row, id core.AccountID, seq *int64) (ledger.Usage, error) {
	u := ledger.Usage{Account: id}
	var eventID []byte
	var source int16
	var leaseID, token, units int64
	dest := []any{&eventID, &source, &leaseID, &token, &units, &u.OccurredAt}
	if seq != nil {
		dest = append([]any{seq}, dest...)
	}
	if err := row.Scan(dest...); err != nil {
		return u, err
	}
	if len(eventID) != 16 || units <= 0 {
		return u, fmt.Errorf("%w: usage of %s", ErrCorrupt, id)
	}
	// lease_id and token hold the event's uint64s bit for bit.
	u.ID, u.Source = [16]byte(eventID), ledger.UsageSource(source)
	u.LeaseID, u.Token, u.Units = uint64(leaseID), uint64(token), core.CostUnits(units)
	return u, nil
}
