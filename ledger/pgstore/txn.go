package pgstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// txn is one read-write transaction with a cache of the accounts and
// leases it has locked. Rules mutate the cached values in place (through
// pointers), so every rule of one call sees the others' effects — the
// events of an ingest batch see each other — and flush writes each changed
// record once, at the end, set-wise (one UPDATE … FROM unnest per table;
// an extended lease has a statement of its own), together with what
// follows from it: the change log entries of configuration changes
// (changes.go) and any statement the call queued. Deriving the change log
// from the records' before and after states means no call can forget it.
//
// Lock order (see the package comment): a call locks its leases before its
// accounts, and all its accounts in one statement, in id order
// (lockAccounts), so they can never be locked twice out of order.
type txn struct {
	ctx      context.Context
	tx       pgx.Tx
	accounts map[core.AccountID]*cachedAccount
	leases   map[uint64]*cachedLease
	locked   bool // accounts were locked: a second lockAccounts would break the lock order
	changes  []change
	funds    []core.AccountID // accounts whose ledger.Spendable moved (funds.go)
	queued   []queuedStatement
}

type cachedAccount struct {
	a            ledger.Account
	was          accountRow     // as loaded
	wasSpendable core.CostUnits // ledger.Spendable as loaded
}

type cachedLease struct {
	rec        ledger.LeaseRecord
	was        ledger.Lease     // as loaded; zero for a new lease
	wasFunding []ledger.Funding // as loaded
	isNew      bool
}

type queuedStatement struct {
	sql   string
	args  []any
	check func(pgconn.CommandTag) error // nil: any result is fine
}

func newTxn(ctx context.Context, tx pgx.Tx) *txn {
	return &txn{ctx: ctx, tx: tx, accounts: make(map[core.AccountID]*cachedAccount), leases: make(map[uint64]*cachedLease)}
}

// lockAccountsSQL locks the accounts named by $1 and all their ancestors,
// in id order (the lock is taken row by row as the sorted rows come out).
const lockAccountsSQL = `WITH RECURSIVE chain (id, parent) AS (
		SELECT id, parent FROM accounts WHERE id = ANY($1::text[])
		UNION
		SELECT a.id, a.parent FROM accounts a JOIN chain c ON a.id = c.parent)
	SELECT ` + accountColumns + ` FROM accounts WHERE id IN (SELECT id FROM chain)
	ORDER BY id FOR NO KEY UPDATE OF accounts`

// lockAccounts locks and caches the accounts ids and their ancestries.
// Unknown ids are simply not cached (account reports ErrNotFound), nor
// looked up if they are not valid ids. A call may lock accounts once.
func (x *txn) lockAccounts(ids []core.AccountID) error {
	if x.locked {
		panic("pgstore: accounts locked twice in one transaction (the lock order would break)")
	}
	x.locked = true
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if id.Validate() == nil {
			valid = append(valid, string(id))
		}
	}
	if len(valid) == 0 {
		return nil
	}
	rows, err := x.tx.Query(x.ctx, lockAccountsSQL, valid)
	if err != nil {
		return err
	}
	return x.cacheAccounts(rows, nil)
}

// cacheAccounts caches each row of accountColumns (already locked) and
// appends it to into, if into is not nil.
func (x *txn) cacheAccounts(rows pgx.Rows, into *[]*ledger.Account) error {
	defer rows.Close()
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return err
		}
		was, err := encodeAccount(&a)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		spendable, err := ledger.Spendable(&a)
		if err != nil {
			return fmt.Errorf("%w: account %s: %w", ErrCorrupt, a.ID, err)
		}
		c := &cachedAccount{a: a, was: was, wasSpendable: spendable}
		x.accounts[a.ID] = c
		if into != nil {
			*into = append(*into, &c.a)
		}
	}
	return rows.Err()
}

// account returns the cached account id, or ErrNotFound.
func (x *txn) account(id core.AccountID) (*ledger.Account, error) {
	if c, ok := x.accounts[id]; ok {
		return &c.a, nil
	}
	return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
}

// ancestry returns the cached id and its ancestors, leaf first.
func (x *txn) ancestry(id core.AccountID) (ledger.Ancestry, error) {
	a, err := x.account(id)
	if err != nil {
		return nil, err
	}
	an := ledger.Ancestry{a}
	for a.Parent != "" {
		if len(an) == 3 { // org → workspace → agent is as deep as it gets
			return nil, fmt.Errorf("%w: ancestry of %s is deeper than three", ErrCorrupt, id)
		}
		if a, err = x.account(a.Parent); err != nil {
			return nil, fmt.Errorf("%w: ancestry of %s: %w", ErrCorrupt, id, err)
		}
		an = append(an, a)
	}
	return an, nil
}

// lockLeases runs query, which selects leaseColumns FOR UPDATE, and caches
// and returns the leases in row order.
func (x *txn) lockLeases(query string, args ...any) ([]*ledger.LeaseRecord, error) {
	if x.locked {
		panic("pgstore: leases locked after accounts (the lock order would break)")
	}
	rows, err := x.tx.Query(x.ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*ledger.LeaseRecord
	for rows.Next() {
		rec, err := scanLease(rows)
		if err != nil {
			return nil, err
		}
		c := &cachedLease{rec: rec, was: rec.Lease, wasFunding: slices.Clone(rec.Funding)}
		x.leases[rec.ID] = c
		out = append(out, &c.rec)
	}
	return out, rows.Err()
}

// lease returns the cached lease id, or ErrNotFound.
func (x *txn) lease(id uint64) (*ledger.LeaseRecord, error) {
	if c, ok := x.leases[id]; ok {
		return &c.rec, nil
	}
	return nil, fmt.Errorf("%w: lease %d", ledger.ErrNotFound, id)
}

// insertLease caches a new lease; flush writes it.
func (x *txn) insertLease(rec ledger.LeaseRecord) {
	x.leases[rec.ID] = &cachedLease{rec: rec, isNew: true}
}

// nextLeaseID draws the store-wide lease sequence (not rolled back: a
// failed grant leaves a gap).
func (x *txn) nextLeaseID() (uint64, error) {
	var id int64
	if err := x.tx.QueryRow(x.ctx, "SELECT nextval('lease_ids')").Scan(&id); err != nil {
		return 0, err
	}
	return uint64(id), nil
}

// funders returns the cached accounts that funded rec, in rec.Funding
// order. They are in the ancestry of rec's account, which the caller
// locked.
func (x *txn) funders(rec *ledger.LeaseRecord) ([]*ledger.Account, error) {
	out := make([]*ledger.Account, len(rec.Funding))
	for i, f := range rec.Funding {
		a, err := x.account(f.Account)
		if err != nil {
			return nil, fmt.Errorf("%w: funder of lease %d: %w", ErrCorrupt, rec.ID, err)
		}
		out[i] = a
	}
	return out, nil
}

// queue runs sql with the write-back, in order after the records; check,
// if not nil, judges its result.
func (x *txn) queue(sql string, check func(pgconn.CommandTag) error, args ...any) {
	x.queued = append(x.queued, queuedStatement{sql: sql, args: args, check: check})
}

// flush writes every cached record that changed, the queued statements and
// the change log, in one round trip.
func (x *txn) flush() error {
	b := &pgx.Batch{}
	if err := x.flushAccounts(b); err != nil {
		return err
	}
	if err := x.flushLeases(b); err != nil {
		return err
	}
	for _, q := range x.queued {
		qq := b.Queue(q.sql, q.args...)
		if q.check != nil {
			qq.Exec(q.check)
		}
	}
	x.flushChanges(b)
	x.flushFunds(b)
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

// accountRow is an account's mutable columns, as stored: comparing two
// tells whether an account changed.
type accountRow struct {
	status, budgetPeriod   int16
	policy                 string
	hasPolicy              bool
	generation, allowance  int64
	money                  [9]int64 // moneyFields' order
	periodStart, periodEnd int64
	nextToken              int64
}

func encodeAccount(a *ledger.Account) (accountRow, error) {
	var w writer
	r := accountRow{status: int16(a.Status), budgetPeriod: int16(a.Budget.Period), policy: string(a.Policy),
		hasPolicy: a.Policy != nil, generation: w.int("policy generation", a.PolicyGeneration),
		allowance: w.units("budget allowance", a.Budget.Allowance), periodStart: a.PeriodStart, periodEnd: a.PeriodEnd,
		nextToken: w.int("next fencing token", a.NextToken)}
	for i, v := range moneyFields(a) {
		r.money[i] = w.units("money", *v)
	}
	if w.err != nil {
		return r, fmt.Errorf("account %s: %w", a.ID, w.err)
	}
	return r, nil
}

// flushAccounts queues one UPDATE for every changed account and logs what
// changed in their configuration.
func (x *txn) flushAccounts(b *pgx.Batch) error {
	var cols struct {
		ids                    []string
		status, period         []int16
		policy                 [][]byte
		generation, allowance  []int64
		money                  [9][]int64
		periodStart, periodEnd []int64
		nextToken              []int64
	}
	for _, id := range slices.Sorted(maps.Keys(x.accounts)) {
		c := x.accounts[id]
		r, err := encodeAccount(&c.a)
		if err != nil {
			return err
		}
		if r == c.was {
			continue
		}
		x.logAccountChanges(&c.a, c.was, r)
		if err := x.noteFunds(c); err != nil {
			return err
		}
		cols.ids = append(cols.ids, string(id))
		cols.status, cols.period = append(cols.status, r.status), append(cols.period, r.budgetPeriod)
		cols.policy = append(cols.policy, c.a.Policy)
		cols.generation, cols.allowance = append(cols.generation, r.generation), append(cols.allowance, r.allowance)
		for i := range cols.money {
			cols.money[i] = append(cols.money[i], r.money[i])
		}
		cols.periodStart, cols.periodEnd = append(cols.periodStart, r.periodStart), append(cols.periodEnd, r.periodEnd)
		cols.nextToken = append(cols.nextToken, r.nextToken)
	}
	if len(cols.ids) == 0 {
		return nil
	}
	m := cols.money
	b.Queue(updateAccountsSQL, cols.ids, cols.status, cols.policy, cols.generation, cols.allowance, cols.period,
		m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], cols.periodStart, cols.periodEnd, cols.nextToken).
		Exec(affects("updating accounts", len(cols.ids)))
	return nil
}

// logAccountChanges appends the change log entries of an account whose row
// went from was to now: money moved by leases and usage is not one.
func (x *txn) logAccountChanges(a *ledger.Account, was, now accountRow) {
	if was.status != now.status {
		x.change(changeStatus, a.ID, "", "")
	}
	if was.policy != now.policy || was.hasPolicy != now.hasPolicy {
		x.change(changePolicy, a.ID, "", "")
	}
	if was.budgetPeriod != now.budgetPeriod || was.allowance != now.allowance ||
		was.periodStart != now.periodStart || was.periodEnd != now.periodEnd {
		x.change(changeBudget, a.ID, "", "")
	}
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

// flushLeases inserts new leases and updates changed ones. Of a lease,
// only Used, Credited and State change, and an extension's Granted,
// ExpiresAt and funded amounts; the rest is fixed at the grant.
func (x *txn) flushLeases(b *pgx.Batch) error {
	var ids, used, credited []int64
	var states []int16
	for _, id := range slices.Sorted(maps.Keys(x.leases)) {
		c := x.leases[id]
		l := &c.rec
		extended := !c.isNew && (l.Granted != c.was.Granted || l.ExpiresAt != c.was.ExpiresAt || !slices.Equal(l.Funding, c.wasFunding))
		if !c.isNew && !extended && l.Lease == c.was {
			continue
		}
		if !c.isNew && c.fixedChanged() {
			return fmt.Errorf("pgstore: lease %d: a field fixed at the grant changed, from %+v %+v to %+v", l.ID, c.was, c.wasFunding, c.rec)
		}
		var w writer
		lid := w.int("lease id", l.ID)
		switch {
		case c.isNew:
			funders := make([]string, len(l.Funding))
			periodStart := make([]int64, len(l.Funding))
			for i, f := range l.Funding {
				funders[i], periodStart[i] = string(f.Account), f.PeriodStart
			}
			allowance, topUp := fundedAmounts(&w, l.Funding)
			b.Queue(insertLeaseSQL, lid, string(l.Account), l.Holder, w.int("fencing token", l.Token), w.units("granted", l.Granted),
				w.units("used", l.Used), w.units("credited", l.Credited), int16(l.State), l.GrantedAt, l.ExpiresAt,
				funders, allowance, topUp, periodStart, l.Grace)
		case extended:
			allowance, topUp := fundedAmounts(&w, l.Funding)
			b.Queue(extendLeaseSQL, lid, w.units("granted", l.Granted), l.ExpiresAt, allowance, topUp,
				w.units("used", l.Used), w.units("credited", l.Credited), int16(l.State)).Exec(affects("extending a lease", 1))
		default:
			ids, states = append(ids, lid), append(states, int16(l.State))
			used, credited = append(used, w.units("used", l.Used)), append(credited, w.units("credited", l.Credited))
		}
		if w.err != nil {
			return fmt.Errorf("lease %d: %w", l.ID, w.err)
		}
	}
	if len(ids) > 0 {
		b.Queue(updateLeasesSQL, ids, used, credited, states).Exec(affects("updating leases", len(ids)))
	}
	return nil
}

// fixedChanged reports whether a field fixed at the grant changed (the
// holder, the token, the funders and their periods…): a bug, as flush
// writes only the fields that may change.
func (c *cachedLease) fixedChanged() bool {
	l, was := &c.rec, &c.was
	if l.Account != was.Account || l.Holder != was.Holder || l.Token != was.Token || l.GrantedAt != was.GrantedAt ||
		l.Grace != was.Grace || len(l.Funding) != len(c.wasFunding) {
		return true
	}
	for i, f := range l.Funding {
		if f.Account != c.wasFunding[i].Account || f.PeriodStart != c.wasFunding[i].PeriodStart {
			return true
		}
	}
	return false
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
