package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// pgTx is one read-write transaction's rows (txn.Tx). Locking reads run at
// once; writes are queued and sent at the end in one round trip (flush),
// together with the change log entries of configuration changes
// (changes.go) and the funds announcement (funds.go). Records arrive
// set-wise (txn.BatchWriter): one UPDATE … FROM unnest per table, whatever
// the number of accounts and leases a call changed.
//
// Lock order (see the package comment): the scripts lock leases before
// accounts, and all of a call's accounts in one statement, in id order
// (lockAccountsSQL).
type pgTx struct {
	ctx     context.Context
	tx      pgx.Tx
	history int64 // Options.UsageHistory
	queued  []queuedStatement
	changes []change
	funds   string // the funds announcement's payload; "" for none
}

var (
	_ txn.Tx             = (*pgTx)(nil)
	_ txn.BatchWriter    = (*pgTx)(nil)
	_ txn.FundsAnnouncer = (*pgTx)(nil)
)

type queuedStatement struct {
	sql   string
	args  []any
	check func(pgconn.CommandTag) error // nil: any result is fine
}

// queue runs sql with the write-back, in order; check, if not nil, judges
// its result.
func (x *pgTx) queue(sql string, check func(pgconn.CommandTag) error, args ...any) {
	x.queued = append(x.queued, queuedStatement{sql: sql, args: args, check: check})
}

// flush sends the queued statements, the change log and the funds
// announcement, in one round trip.
func (x *pgTx) flush() error {
	b := &pgx.Batch{}
	for _, q := range x.queued {
		qq := b.Queue(q.sql, q.args...)
		if q.check != nil {
			qq.Exec(q.check)
		}
	}
	x.flushChanges(b)
	if x.funds != "" {
		b.Queue("SELECT pg_notify('"+FundsChannel+"', $1)", x.funds)
	}
	if b.Len() == 0 {
		return nil
	}
	return x.tx.SendBatch(x.ctx, b).Close()
}

// affects is a result check: the statement must touch exactly n rows.
func affects(what string, n int) func(pgconn.CommandTag) error {
	return func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() != int64(n) {
			return fmt.Errorf("%w: %s touched %d rows, not %d", ErrCorrupt, what, tag.RowsAffected(), n)
		}
		return nil
	}
}

// collect runs query and scans its rows; no rows is nil.
func collect[T any](ctx context.Context, q querier, scan func(pgx.Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// Account implements txn.Tx.
func (x *pgTx) Account(id core.AccountID) (ledger.Account, error) {
	return readAccount(x.ctx, x.tx, id)
}

// chainSQL reads the accounts named by $1 and all their ancestors, in id
// order; lockAccountsSQL locks them too (row by row as the sorted rows
// come out).
const (
	chainSQL = `WITH RECURSIVE chain (id, parent) AS (
		SELECT id, parent FROM accounts WHERE id = ANY($1::text[])
		UNION
		SELECT a.id, a.parent FROM accounts a JOIN chain c ON a.id = c.parent)
	SELECT ` + accountColumns + ` FROM accounts WHERE id IN (SELECT id FROM chain)
	ORDER BY id`
	lockAccountsSQL = chainSQL + " FOR NO KEY UPDATE OF accounts"
)

// LockAccounts implements txn.Tx, in one statement. Accounts are locked
// FOR NO KEY UPDATE (they never change their key), so rows that reference
// them (new leases, keys, children) still insert beside a lock.
func (x *pgTx) LockAccounts(ids []core.AccountID) ([]ledger.Account, error) {
	text := make([]string, len(ids))
	for i, id := range ids {
		text[i] = string(id)
	}
	return collect(x.ctx, x.tx, scanAccount, lockAccountsSQL, text)
}

// DueAccounts implements txn.Tx, skipping accounts another transaction
// holds (another node's rollover, or a grant that rolls them over
// lazily): every node may run it at once.
func (x *pgTx) DueAccounts(now int64, limit int) ([]ledger.Account, error) {
	return collect(x.ctx, x.tx, scanAccount, "SELECT "+accountColumns+` FROM accounts
		WHERE budget_period <> 0 AND period_end <= $1 ORDER BY period_end, id LIMIT $2
		FOR NO KEY UPDATE SKIP LOCKED`, now, limit)
}

const insertAccountSQL = `INSERT INTO accounts (id, parent, capacity, unmetered, scope, status, policy, policy_generation,
		budget_allowance, budget_period, deposited, overage, allowance_left, top_up_left, outstanding, settled,
		loss, expired, repaid, period_start, period_end, next_token)
	VALUES ($1, nullif($2, ''), $3, $4, $5, $6, NULL, $7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, $8)
	ON CONFLICT (id) DO NOTHING`

// InsertAccount implements txn.Tx. An id another transaction is inserting
// waits for it to commit, and then is not inserted.
func (x *pgTx) InsertAccount(a *ledger.Account) (bool, error) {
	tag, err := x.tx.Exec(x.ctx, insertAccountSQL, string(a.ID), string(a.Parent), int16(a.Capacity), a.Unmetered,
		int16(a.Scope), int16(a.Status), int64(a.PolicyGeneration), int64(a.NextToken))
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	x.change(ChangeAccount, a.ID, "", "")
	return true, nil
}

// PutAccount implements txn.Tx.
func (x *pgTx) PutAccount(was, now *ledger.Account) error {
	return x.PutAccounts([]txn.AccountWrite{{Was: was, Now: now}})
}

const updateAccountsSQL = `UPDATE accounts AS a SET status = u.status, policy = u.policy,
		policy_generation = u.policy_generation, budget_allowance = u.budget_allowance,
		budget_period = u.budget_period, deposited = u.deposited, overage = u.overage,
		allowance_left = u.allowance_left, top_up_left = u.top_up_left, outstanding = u.outstanding,
		settled = u.settled, loss = u.loss, expired = u.expired, repaid = u.repaid, period_start = u.period_start,
		period_end = u.period_end, next_token = u.next_token
	FROM unnest($1::text[], $2::smallint[], $3::bytea[], $4::bigint[], $5::bigint[], $6::smallint[],
		$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[],
		$14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[])
		AS u(id, status, policy, policy_generation, budget_allowance, budget_period, deposited, overage,
		allowance_left, top_up_left, outstanding, settled, loss, expired, repaid, period_start, period_end, next_token)
	WHERE a.id = u.id`

// PutAccounts implements txn.BatchWriter: one UPDATE for every changed
// account, and the change log entries of what changed in their
// configuration.
func (x *pgTx) PutAccounts(ws []txn.AccountWrite) error {
	var cols struct {
		ids                    []string
		status, period         []int16
		policy                 [][]byte
		generation, allowance  []int64
		money                  [9][]int64
		periodStart, periodEnd []int64
		nextToken              []int64
	}
	var w writer
	for _, aw := range ws {
		a := aw.Now
		x.logAccountChanges(aw.Was, a)
		cols.ids = append(cols.ids, string(a.ID))
		cols.status, cols.period = append(cols.status, int16(a.Status)), append(cols.period, int16(a.Budget.Period))
		cols.policy = append(cols.policy, a.Policy)
		cols.generation = append(cols.generation, w.int("policy generation", a.PolicyGeneration))
		cols.allowance = append(cols.allowance, w.units("budget allowance", a.Budget.Allowance))
		for i, v := range moneyFields(a) {
			cols.money[i] = append(cols.money[i], w.units("money", *v))
		}
		cols.periodStart, cols.periodEnd = append(cols.periodStart, a.PeriodStart), append(cols.periodEnd, a.PeriodEnd)
		cols.nextToken = append(cols.nextToken, w.int("next fencing token", a.NextToken))
		if w.err != nil {
			return fmt.Errorf("account %s: %w", a.ID, w.err)
		}
	}
	m := cols.money
	x.queue(updateAccountsSQL, affects("updating accounts", len(cols.ids)), cols.ids, cols.status, cols.policy, cols.generation,
		cols.allowance, cols.period, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], cols.periodStart, cols.periodEnd, cols.nextToken)
	return nil
}

// logAccountChanges appends the change log entries of an account that went
// from was to now: money moved by leases and usage is not one.
func (x *pgTx) logAccountChanges(was, now *ledger.Account) {
	if was.Status != now.Status {
		x.change(ChangeStatus, now.ID, "", "")
	}
	if (was.Policy == nil) != (now.Policy == nil) || string(was.Policy) != string(now.Policy) {
		x.change(ChangePolicy, now.ID, "", "")
	}
	if was.Budget != now.Budget || was.PeriodStart != now.PeriodStart || was.PeriodEnd != now.PeriodEnd {
		x.change(ChangeBudget, now.ID, "", "")
	}
}

// Deposit implements txn.Tx.
func (x *pgTx) Deposit(id core.AccountID, key string) (core.CostUnits, bool, error) {
	var units int64
	err := x.tx.QueryRow(x.ctx, "SELECT units FROM deposits WHERE account = $1 AND key = $2", string(id), key).Scan(&units)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return core.CostUnits(units), true, nil
}

// PutDeposit implements txn.Tx; a deposit is a change of the log.
func (x *pgTx) PutDeposit(id core.AccountID, key string, units core.CostUnits, now int64) error {
	var w writer
	x.queue("INSERT INTO deposits (account, key, units, at) VALUES ($1, $2, $3, $4)", affects("recording a deposit", 1),
		string(id), key, w.units("deposit", units), now)
	x.change(ChangeDeposit, id, "", "")
	return w.err
}

// LockLeases implements txn.Tx. An id beyond a bigint names no lease.
func (x *pgTx) LockLeases(ids []uint64) ([]ledger.LeaseRecord, error) {
	stored := make([]int64, 0, len(ids))
	for _, id := range ids {
		if id <= math.MaxInt64 {
			stored = append(stored, int64(id))
		}
	}
	if len(stored) == 0 {
		return nil, nil
	}
	return collect(x.ctx, x.tx, scanLease, "SELECT "+leaseColumns+" FROM leases WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE", stored)
}

// reclaimSQL locks up to $3 active leases past their ReclaimableAt — their
// own grace, or $2 for those that keep none — at $1, earliest first,
// skipping those another transaction holds (another node's reclaim, or
// their holder's late release): every node may reclaim at once. Every
// lease is reclaimable at its expiry or later, so the partial index of
// active leases by expiry bounds what it reads; the sum is numeric, so it
// cannot overflow.
const reclaimSQL = "SELECT " + leaseColumns + ` FROM leases
	WHERE state = 1 AND expires_at <= $1
		AND expires_at::numeric + CASE WHEN grace >= 0 THEN grace ELSE $2 END <= $1
	ORDER BY expires_at::numeric + CASE WHEN grace >= 0 THEN grace ELSE $2 END, id
	LIMIT $3 FOR UPDATE SKIP LOCKED`

// DueLeases implements txn.Tx.
func (x *pgTx) DueLeases(now, grace int64, limit int) ([]ledger.LeaseRecord, error) {
	return collect(x.ctx, x.tx, scanLease, reclaimSQL, now, grace, limit)
}

// NextLeaseID implements txn.Tx: the store-wide lease sequence (not rolled
// back: a failed grant leaves a gap).
func (x *pgTx) NextLeaseID() (uint64, error) {
	var id int64
	if err := x.tx.QueryRow(x.ctx, "SELECT nextval('lease_ids')").Scan(&id); err != nil {
		return 0, err
	}
	return uint64(id), nil
}

// PutLease implements txn.Tx.
func (x *pgTx) PutLease(was, now *ledger.LeaseRecord) error {
	return x.PutLeases([]txn.LeaseWrite{{Was: was, Now: now}})
}

const insertLeaseSQL = `INSERT INTO leases (` + leaseColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`

// updateLeasesSQL writes what usage, a release and a reclaim change, for
// any number of leases.
const updateLeasesSQL = `UPDATE leases AS l SET used = u.used, credited = u.credited, state = u.state
	FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::smallint[]) AS u(id, used, credited, state)
	WHERE l.id = u.id`

// extendLeaseSQL writes a lease an extension changed: its grant, its
// expiry and what each funder paid, in one statement (the CHECK that every
// funder paid the whole grant reads them together), with the columns
// updateLeasesSQL writes.
const extendLeaseSQL = `UPDATE leases SET granted = $2, expires_at = $3, funded_allowance = $4, funded_top_up = $5,
		used = $6, credited = $7, state = $8
	WHERE id = $1`

// PutLeases implements txn.BatchWriter: it inserts new leases and updates
// changed ones. Of a lease, only Used, Credited and State change, and an
// extension's Granted, ExpiresAt and funded amounts; the rest is fixed at
// the grant (the scripts' flush refuses a change to it). The holder is text: at most 256 bytes of UTF-8 without NUL
// bytes (Store checks it first).
func (x *pgTx) PutLeases(ws []txn.LeaseWrite) error {
	var ids, used, credited []int64
	var states []int16
	for _, lw := range ws {
		l, was := lw.Now, lw.Was
		var w writer
		lid := w.int("lease id", l.ID)
		switch {
		case was == nil:
			funders := make([]string, len(l.Funding))
			periodStart := make([]int64, len(l.Funding))
			for i, f := range l.Funding {
				funders[i], periodStart[i] = string(f.Account), f.PeriodStart
			}
			allowance, topUp := fundedAmounts(&w, l.Funding)
			x.queue(insertLeaseSQL, nil, lid, string(l.Account), l.Holder, w.int("fencing token", l.Token), w.units("granted", l.Granted),
				w.units("used", l.Used), w.units("credited", l.Credited), int16(l.State), l.GrantedAt, l.ExpiresAt,
				funders, allowance, topUp, periodStart, l.Grace)
		case l.Granted != was.Granted || l.ExpiresAt != was.ExpiresAt || !slices.Equal(l.Funding, was.Funding):
			allowance, topUp := fundedAmounts(&w, l.Funding)
			x.queue(extendLeaseSQL, affects("extending a lease", 1), lid, w.units("granted", l.Granted), l.ExpiresAt, allowance, topUp,
				w.units("used", l.Used), w.units("credited", l.Credited), int16(l.State))
		default:
			ids, states = append(ids, lid), append(states, int16(l.State))
			used, credited = append(used, w.units("used", l.Used)), append(credited, w.units("credited", l.Credited))
		}
		if w.err != nil {
			return fmt.Errorf("lease %d: %w", l.ID, w.err)
		}
	}
	if len(ids) > 0 {
		x.queue(updateLeasesSQL, affects("updating leases", len(ids)), ids, used, credited, states)
	}
	return nil
}

// fundedAmounts are the funded_allowance and funded_top_up columns of a
// lease funded by f.
func fundedAmounts(w *writer, f []ledger.Funding) (allowance, topUp []int64) {
	allowance, topUp = make([]int64, len(f)), make([]int64, len(f))
	for i := range f {
		allowance[i], topUp[i] = w.units("funded allowance", f[i].Allowance), w.units("funded top-up", f[i].TopUp)
	}
	return allowance, topUp
}

// Incarnation implements txn.Tx (migrations/0004: the nodes table holds
// each node id's current incarnation). A node id that is not text has
// none.
func (x *pgTx) Incarnation(node string, lock bool) (ledger.Incarnation, bool, error) {
	if validName("node", node) != nil {
		return ledger.Incarnation{}, false, nil
	}
	query := "SELECT " + incarnationColumns + " FROM nodes WHERE node = $1"
	if lock {
		query += " FOR UPDATE"
	}
	i, err := scanIncarnation(x.tx.QueryRow(x.ctx, query, node))
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Incarnation{}, false, nil
	}
	return i, err == nil, err
}

// PutIncarnation implements txn.Tx.
func (x *pgTx) PutIncarnation(i *ledger.Incarnation) error {
	var w writer
	n := w.int("incarnation", i.Number)
	if w.err != nil {
		return w.err
	}
	_, err := x.tx.Exec(x.ctx, `INSERT INTO nodes (`+incarnationColumns+`) VALUES ($1, $2, $3, $4)
		ON CONFLICT (node) DO UPDATE SET incarnation = $2, grace = $3, started_at = $4`, i.Node, n, i.Grace, i.StartedAt)
	return err
}

// TakeMark implements txn.Tx: it locks node's mark row, creating it at 0
// if the node never settled. The row is the first lock a settlement takes
// (the lock order's head, before leases): a node's settlements run one at
// a time, other nodes' never wait for it.
func (x *pgTx) TakeMark(node string, now int64) (uint64, error) {
	var mark int64
	err := x.tx.QueryRow(x.ctx, `INSERT INTO export_marks AS m (node, mark, settled_at) VALUES ($1, 0, $2)
		ON CONFLICT (node) DO UPDATE SET node = m.node
		RETURNING mark`, node, now).Scan(&mark)
	if err == nil && mark < 0 {
		err = fmt.Errorf("%w: export mark %d of node %q", ErrCorrupt, mark, node)
	}
	return uint64(mark), err
}

// PutMark implements txn.Tx.
func (x *pgTx) PutMark(node string, from, to uint64, now int64) error {
	if to > math.MaxInt64 {
		return fmt.Errorf("%w: export mark %d exceeds the 2^63-1 a PostgreSQL bigint holds", ledger.ErrOverflow, to)
	}
	x.queue("UPDATE export_marks SET mark = $2, settled_at = $3 WHERE node = $1 AND mark = $4", affects("moving the export mark", 1),
		node, int64(to), now, int64(from))
	return nil
}

// AnnounceFunds implements txn.FundsAnnouncer (funds.go).
func (x *pgTx) AnnounceFunds(ids []core.AccountID) error {
	x.funds = fundsPayload(ids)
	return nil
}

// InsertSecretFingerprint implements txn.Tx.
func (x *pgTx) InsertSecretFingerprint(fp [32]byte) (bool, error) {
	tag, err := x.tx.Exec(x.ctx, "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
		settingSecretFingerprint, fp[:])
	return err == nil && tag.RowsAffected() == 1, err
}

// AppendAudit implements txn.Tx: the sequence is a counter row, not a
// PostgreSQL sequence, so it has no gaps.
func (x *pgTx) AppendAudit(r *ledger.AuditRecord) (uint64, error) {
	var n int64
	err := x.tx.QueryRow(x.ctx, `WITH next AS (UPDATE counters SET value = value + 1 WHERE name = 'audit' RETURNING value)
		INSERT INTO audit (seq, at, actor, action, target, before, after)
		SELECT value, $1, $2, $3, $4, $5, $6 FROM next RETURNING seq`,
		r.At, r.Actor, r.Action, r.Target, r.Before, r.After).Scan(&n)
	return uint64(n), err
}
