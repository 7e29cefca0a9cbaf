package pgstore

import (
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// Usage statements. A batch travels as arrays, so an ingest or a
// settlement of any size is a fixed number of statements: claim the ids,
// lock the leases, lock the accounts, then one round trip that writes back
// the records, the verdicts, the usage history and the usage totals.
const (
	// claimEventsSQL records every id not seen before, in id order (the
	// lock order between two batches sharing ids), and returns those it
	// recorded. A batch that meets an id another transaction is recording
	// waits for it, then sees it: an id is claimed by one batch only.
	claimEventsSQL = `INSERT INTO events (id, ingested_at, verdict)
		SELECT id, $2, 1 FROM unnest($1::bytea[]) AS id ORDER BY id
		ON CONFLICT (id) DO NOTHING RETURNING id`
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
		SELECT * FROM unnest($1::text[], $2::smallint[], $3::bigint[], $4::bigint[])
		ON CONFLICT (account, source) DO UPDATE
		SET events = usage_totals.events + excluded.events, units = usage_totals.units + excluded.units`
	// forgetEventsSQL deletes up to $2 ids ingested before $1, oldest
	// first, skipping ids another transaction holds (another node
	// forgetting, or a batch claiming them): every node may run it at once.
	forgetEventsSQL = `WITH doomed AS (
			SELECT id FROM events WHERE ingested_at < $1 ORDER BY ingested_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM events AS e USING doomed WHERE e.id = doomed.id`
)

// ClaimEvents implements txn.Tx, in one statement.
func (x *pgTx) ClaimEvents(ids [][16]byte, now int64) ([]bool, error) {
	at := make(map[[16]byte]int, len(ids))
	raw := make([][]byte, len(ids))
	for i := range ids {
		at[ids[i]], raw[i] = i, ids[i][:]
	}
	rows, err := x.tx.Query(x.ctx, claimEventsSQL, raw, now)
	if err != nil {
		return nil, err
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, err
	}
	claimed := make([]bool, len(ids))
	for _, id := range recorded {
		if len(id) != 16 {
			return nil, fmt.Errorf("%w: event id of %d bytes", ErrCorrupt, len(id))
		}
		claimed[at[[16]byte(id)]] = true
	}
	return claimed, nil
}

// RejectEvents implements txn.Tx.
func (x *pgTx) RejectEvents(ids [][16]byte) error {
	raw := make([][]byte, len(ids))
	for i := range ids {
		raw[i] = ids[i][:]
	}
	x.queue(rejectSQL, affects("recording rejections", len(ids)), raw)
	return nil
}

// ForgetEvents implements txn.Tx.
func (x *pgTx) ForgetEvents(before int64, limit int) (int, error) {
	tag, err := x.tx.Exec(x.ctx, forgetEventsSQL, before, limit)
	return int(tag.RowsAffected()), err
}

// RecordUsage implements txn.Tx: the totals are added to the usage totals
// the reconciliation query checks Settled against, and the history to the
// accounts' recent usage, each account trimmed to its last history events.
// Of an account's events only its last history ones are inserted: the
// older ones would be trimmed at once.
func (x *pgTx) RecordUsage(history []*ledger.Usage, totals []txn.UsageTotal) error {
	var w writer
	if len(totals) > 0 {
		var accounts []string
		var sources []int16
		var events, units []int64
		for _, t := range totals {
			accounts, sources = append(accounts, string(t.Account)), append(sources, int16(t.Source))
			events, units = append(events, w.int("events", t.Events)), append(units, w.units("usage", t.Units))
		}
		x.queue(addTotalsSQL, nil, accounts, sources, events, units)
	}
	if len(history) == 0 {
		return w.err
	}
	var kept struct {
		accounts       []string
		ids            [][]byte
		sources        []int16
		leases, tokens []int64
		units, at      []int64
	}
	// An account's first older events of the batch are not kept.
	older := make(map[core.AccountID]int64)
	for _, e := range history {
		older[e.Account]++
	}
	accounts := make([]string, 0, len(older))
	for id, n := range older {
		older[id] = n - x.history
		accounts = append(accounts, string(id))
	}
	slices.Sort(accounts)
	for _, e := range history {
		if older[e.Account] > 0 {
			older[e.Account]--
			continue
		}
		kept.accounts, kept.ids, kept.sources = append(kept.accounts, string(e.Account)), append(kept.ids, e.ID[:]), append(kept.sources, int16(e.Source))
		// Kept bit for bit: for overage and post-paid usage they are
		// whatever the event carried.
		kept.leases, kept.tokens = append(kept.leases, int64(e.LeaseID)), append(kept.tokens, int64(e.Token))
		kept.units, kept.at = append(kept.units, w.units("usage", e.Units)), append(kept.at, e.OccurredAt)
	}
	if w.err != nil {
		return w.err
	}
	x.queue(recordUsageSQL, affects("recording usage", len(kept.ids)), kept.accounts, kept.ids, kept.sources, kept.leases, kept.tokens, kept.units, kept.at)
	x.queue(trimUsageSQL, nil, accounts, x.history)
	return nil
}
