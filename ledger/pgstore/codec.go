package pgstore

// Rows to records and back. Amounts, tokens, generations and lease ids are
// uint64 in Go and bigint in the database: reading a negative one means
// the row is corrupt (the CHECK constraints forbid it), writing one above
// 2^63−1 is ErrOverflow. The columns are listed once here, in the order
// the scan functions read them.

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// ErrCorrupt reports a row that does not hold a valid record.
var ErrCorrupt = ledger.ErrCorrupt

// maxNameLen bounds caller-chosen names (deposit keys, key and token ids).
const maxNameLen = txn.MaxNameLen

const accountColumns = `id, coalesce(parent, ''), capacity, unmetered, scope, status, policy, policy_generation,
	budget_allowance, budget_period, deposited, overage, allowance_left, top_up_left, outstanding, settled,
	loss, expired, repaid, period_start, period_end, next_token`

// scanAccount reads one row of accountColumns.
func scanAccount(row pgx.Row) (ledger.Account, error) {
	var a ledger.Account
	var id, parent string
	var capacity, scope, status, period int16
	var generation, allowance, nextToken int64
	var m [9]int64
	err := row.Scan(&id, &parent, &capacity, &a.Unmetered, &scope, &status, &a.Policy, &generation,
		&allowance, &period, &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &m[6], &m[7], &m[8],
		&a.PeriodStart, &a.PeriodEnd, &nextToken)
	if err != nil {
		return ledger.Account{}, err
	}
	a.ID, a.Parent = core.AccountID(id), core.AccountID(parent)
	a.Capacity, a.Scope, a.Status = core.CapacityClass(capacity), core.Scope(scope), core.Status(status)
	a.Budget.Period = ledger.Period(period)
	var d reader
	a.PolicyGeneration = d.uint(generation)
	a.Budget.Allowance = d.units(allowance)
	for i, f := range moneyFields(&a) {
		*f = d.units(m[i])
	}
	a.NextToken = d.uint(nextToken)
	if d.negative || capacity < 0 || scope < 0 || status < 0 || period < 0 {
		return ledger.Account{}, fmt.Errorf("%w: account %s has a negative field", ErrCorrupt, id)
	}
	return a, nil
}

// moneyFields are an account's money columns, in accountColumns' order:
// the eight terms of L1, then Repaid.
func moneyFields(a *ledger.Account) [9]*core.CostUnits {
	return [9]*core.CostUnits{&a.Deposited, &a.Overage, &a.AllowanceLeft, &a.TopUpLeft,
		&a.Outstanding, &a.Settled, &a.Loss, &a.Expired, &a.Repaid}
}

const leaseColumns = `id, account, holder, token, granted, used, credited, state, granted_at, expires_at,
	funders, funded_allowance, funded_top_up, funded_period_start, grace`

// scanLease reads one row of leaseColumns.
func scanLease(row pgx.Row) (ledger.LeaseRecord, error) {
	var rec ledger.LeaseRecord
	var id, token, granted, used, credited int64
	var account string
	var state int16
	var funders []string
	var allowance, topUp, periodStart []int64
	err := row.Scan(&id, &account, &rec.Holder, &token, &granted, &used, &credited, &state, &rec.GrantedAt, &rec.ExpiresAt,
		&funders, &allowance, &topUp, &periodStart, &rec.Grace)
	if err != nil {
		return rec, err
	}
	var d reader
	rec.ID, rec.Account, rec.Token = d.uint(id), core.AccountID(account), d.uint(token)
	rec.Granted, rec.Used, rec.Credited = d.units(granted), d.units(used), d.units(credited)
	rec.State = ledger.LeaseState(state)
	if len(allowance) != len(funders) || len(topUp) != len(funders) || len(periodStart) != len(funders) {
		return rec, fmt.Errorf("%w: lease %d has funding arrays of different lengths", ErrCorrupt, id)
	}
	rec.Funding = make([]ledger.Funding, len(funders))
	for i := range funders {
		rec.Funding[i] = ledger.Funding{Account: core.AccountID(funders[i]), Allowance: d.units(allowance[i]),
			TopUp: d.units(topUp[i]), PeriodStart: periodStart[i]}
	}
	if d.negative || state < 0 || rec.Grace < ledger.NoGrace {
		return rec, fmt.Errorf("%w: lease %d has a negative field", ErrCorrupt, id)
	}
	return rec, nil
}

// reader converts stored bigints to unsigned values; a negative one sets
// negative (and reads as 0), checked once per row.
type reader struct{ negative bool }

func (r *reader) uint(v int64) uint64 {
	if v < 0 {
		r.negative = true
		return 0
	}
	return uint64(v)
}

func (r *reader) units(v int64) core.CostUnits { return core.CostUnits(r.uint(v)) }

// writer converts unsigned values to bigints; the first that does not fit
// is kept as err (ErrOverflow), checked once per record.
type writer struct{ err error }

func (w *writer) int(what string, v uint64) int64 {
	if v > math.MaxInt64 {
		if w.err == nil {
			w.err = fmt.Errorf("%w: %s of %d exceeds the 2^63-1 a PostgreSQL bigint holds", ledger.ErrOverflow, what, v)
		}
		return 0
	}
	return int64(v)
}

func (w *writer) units(what string, v core.CostUnits) int64 { return w.int(what, uint64(v)) }

// validText refuses a string PostgreSQL's text cannot hold, or one longer
// than max bytes when max is not 0 (ErrInvalid).
func validText(what, s string, max int) error {
	if max > 0 && len(s) > max {
		return fmt.Errorf("%w: %s of %d bytes, at most %d", ledger.ErrInvalid, what, len(s), max)
	}
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s must be UTF-8 without NUL bytes", ledger.ErrInvalid, what)
	}
	return nil
}

// validName checks a caller-chosen id: 1 to maxNameLen bytes of text.
func validName(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s id must be 1-%d bytes", ledger.ErrInvalid, what, maxNameLen)
	}
	return validText(what+" id", id, maxNameLen)
}
