package pgstore

// Reads (txn.Queries): one statement each, or one REPEATABLE READ
// snapshot where they take several.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// querier is what pgx.Tx, a pool and a connection have in common.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readAccount reads account id without locking it.
func readAccount(ctx context.Context, q querier, id core.AccountID) (ledger.Account, error) {
	if id.Validate() != nil { // not a stored id; perhaps not even text PostgreSQL can hold
		return ledger.Account{}, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	a, err := scanAccount(q.QueryRow(ctx, "SELECT "+accountColumns+" FROM accounts WHERE id = $1", string(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Account{}, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	return a, err
}

// Account implements ledger.Store.
func (b *backend) Account(ctx context.Context, id core.AccountID) (ledger.Account, error) {
	return readAccount(ctx, b.pool, id)
}

// Accounts implements ledger.Store: every account, in id order.
func (b *backend) Accounts(ctx context.Context) ([]ledger.Account, error) {
	return collect(ctx, b.pool, scanAccount, "SELECT "+accountColumns+" FROM accounts ORDER BY id")
}

// Children implements txn.Queries.
func (b *backend) Children(ctx context.Context, id core.AccountID) ([]core.AccountID, error) {
	var exists bool
	var children []string
	err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM accounts WHERE id = $1),
		array(SELECT id FROM accounts WHERE parent = $1 ORDER BY id)`, string(id)).Scan(&exists, &children)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	var out []core.AccountID
	for _, c := range children {
		out = append(out, core.AccountID(c))
	}
	return out, nil
}

// Ancestry implements txn.Queries, in one statement.
func (b *backend) Ancestry(ctx context.Context, id core.AccountID) (ledger.Ancestry, error) {
	chain, err := collect(ctx, b.pool, scanAccountPtr, chainSQL, []string{string(id)})
	if err != nil {
		return nil, err
	}
	return txn.ReadAncestry(id, among(chain))
}

func scanAccountPtr(row pgx.Row) (*ledger.Account, error) {
	a, err := scanAccount(row)
	return &a, err
}

// among reads accounts from accts.
func among(accts []*ledger.Account) func(core.AccountID) (*ledger.Account, error) {
	byID := make(map[core.AccountID]*ledger.Account, len(accts))
	for _, a := range accts {
		byID[a.ID] = a
	}
	return func(id core.AccountID) (*ledger.Account, error) {
		if a, ok := byID[id]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
}

// Leases implements ledger.Store: every lease, or only the active ones
// (through the partial index of active leases: ended ones pile up), in id
// order.
func (b *backend) Leases(ctx context.Context, active bool) ([]ledger.Lease, error) {
	query := "SELECT " + leaseColumns + " FROM leases ORDER BY id"
	if active {
		query = "SELECT " + leaseColumns + " FROM leases WHERE state = 1 ORDER BY id"
	}
	return collect(ctx, b.pool, scanLeaseOnly, query)
}

func scanLeaseOnly(row pgx.Row) (ledger.Lease, error) {
	rec, err := scanLease(row)
	return rec.Lease, err
}

// LeasesOf implements txn.Queries, through the partial index of leases
// not released by holder.
func (b *backend) LeasesOf(ctx context.Context, holder string) ([]ledger.Lease, error) {
	return collect(ctx, b.pool, scanLeaseOnly, "SELECT "+leaseColumns+" FROM leases WHERE holder = $1 AND state <> 2 ORDER BY id", holder)
}

// ExportMark implements txn.Queries.
func (b *backend) ExportMark(ctx context.Context, node string) (uint64, error) {
	var m int64
	err := b.pool.QueryRow(ctx, "SELECT mark FROM export_marks WHERE node = $1", node).Scan(&m)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, err
	case m < 0:
		return 0, fmt.Errorf("%w: export mark %d of node %q", ErrCorrupt, m, node)
	}
	return uint64(m), nil
}

const incarnationColumns = "node, incarnation, grace, started_at"

func scanIncarnation(row pgx.Row) (ledger.Incarnation, error) {
	var i ledger.Incarnation
	var n int64
	if err := row.Scan(&i.Node, &n, &i.Grace, &i.StartedAt); err != nil {
		return i, err
	}
	if n < 1 || i.Grace < ledger.NoGrace {
		return i, fmt.Errorf("%w: node %q: incarnation %d, grace %d", ErrCorrupt, i.Node, n, i.Grace)
	}
	i.Number = uint64(n)
	return i, nil
}

// Incarnations implements ledger.Store.
func (b *backend) Incarnations(ctx context.Context) ([]ledger.Incarnation, error) {
	return collect(ctx, b.pool, scanIncarnation, "SELECT "+incarnationColumns+" FROM nodes ORDER BY node")
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

// Keys implements ledger.Store: account's keys (every key for ""), in id
// order.
func (b *backend) Keys(ctx context.Context, account core.AccountID) ([]ledger.Key, error) {
	if account == "" {
		return collect(ctx, b.pool, scanKey, "SELECT "+keyColumns+" FROM keys ORDER BY id")
	}
	if account.Validate() != nil {
		return nil, nil // no key belongs to an account that cannot exist
	}
	return collect(ctx, b.pool, scanKey, "SELECT "+keyColumns+" FROM keys WHERE account = $1 ORDER BY id", string(account))
}

// PlatformTokens implements ledger.Store: every token, in id order.
func (b *backend) PlatformTokens(ctx context.Context) ([]ledger.PlatformToken, error) {
	return collect(ctx, b.pool, scanToken, "SELECT "+tokenColumns+" FROM platform_tokens ORDER BY id")
}

// AdminTokens implements ledger.Store: every admin token, in id order.
func (b *backend) AdminTokens(ctx context.Context) ([]ledger.AdminToken, error) {
	return collect(ctx, b.pool, scanAdminToken, "SELECT "+adminTokenColumns+" FROM admin_tokens ORDER BY id")
}

const settingSecretFingerprint = "secret_fingerprint"

// StoredFingerprint implements txn.Queries.
func (b *backend) StoredFingerprint(ctx context.Context) ([]byte, error) {
	var v []byte
	err := b.pool.QueryRow(ctx, "SELECT value FROM settings WHERE name = $1", settingSecretFingerprint).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return v, err
}

// AuditAfter implements txn.Queries: up to limit records with Seq > after,
// ascending.
func (b *backend) AuditAfter(ctx context.Context, after uint64, limit int) ([]ledger.AuditRecord, error) {
	if after >= 1<<63-1 {
		return nil, nil
	}
	return collect(ctx, b.pool, func(row pgx.Row) (ledger.AuditRecord, error) {
		var r ledger.AuditRecord
		var seq int64
		err := row.Scan(&seq, &r.At, &r.Actor, &r.Action, &r.Target, &r.Before, &r.After)
		r.Seq = uint64(seq)
		return r, err
	}, "SELECT seq, at, actor, action, target, before, after FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2", int64(after), limit)
}

// CheckText implements txn.TextChecker.
func (b *backend) CheckText(what, s string, max int) error { return validText(what, s, max) }
