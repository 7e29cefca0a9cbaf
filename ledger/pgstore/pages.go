package pgstore

import (
	"context"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// Paged listings. A cursor is the last item's key as text: an account id,
// or a lease id or usage sequence in decimal (ledger.SeqCursor); a page
// reads at most ledger.MaxPageScan items.

// Account pages: the window of at most ledger.MaxPageScan accounts after the
// cursor (all of them, or one parent's children, through the primary key
// or accounts_by_parent), then the status filter over it.
const (
	listAccountsSQL = "SELECT " + accountColumns + ` FROM (
			SELECT * FROM accounts WHERE id > $1 ORDER BY id LIMIT $2) AS accounts
		WHERE NOT $3 OR status = $4 ORDER BY id LIMIT $5`
	listChildrenSQL = "SELECT " + accountColumns + ` FROM (
			SELECT * FROM accounts WHERE parent = $6 AND id > $1 ORDER BY id LIMIT $2) AS accounts
		WHERE NOT $3 OR status = $4 ORDER BY id LIMIT $5`
	accountWindowSQL  = `SELECT count(*), coalesce(max(id), '') FROM (SELECT id FROM accounts WHERE id > $1 ORDER BY id LIMIT $2) AS w`
	childrenWindowSQL = `SELECT count(*), coalesce(max(id), '') FROM (
			SELECT id FROM accounts WHERE parent = $3 AND id > $1 ORDER BY id LIMIT $2) AS w`
)

// AccountPage implements txn.Queries. A page that the filter leaves short
// of its limit ends the listing only if its window reached the last
// account; otherwise its cursor is the window's last id.
func (b *backend) AccountPage(ctx context.Context, f ledger.AccountFilter, after string, limit int) (out []ledger.Account, next string, err error) {
	limit = min(limit, ledger.MaxPageScan)
	err = b.view(ctx, func(tx pgx.Tx) error {
		query, window := listAccountsSQL, accountWindowSQL
		args := []any{after, ledger.MaxPageScan, f.ByStatus, int16(f.Status), limit + 1}
		windowArgs := []any{after, ledger.MaxPageScan}
		if f.Parent != "" {
			if _, err := readAccount(ctx, tx, f.Parent); err != nil {
				return err
			}
			query, window = listChildrenSQL, childrenWindowSQL
			args, windowArgs = append(args, string(f.Parent)), append(windowArgs, string(f.Parent))
		}
		accts, err := collect(ctx, tx, scanAccount, query, args...)
		if err != nil {
			return err
		}
		if out, next = txn.CutPage(accts, limit, func(a ledger.Account) string { return string(a.ID) }); next != "" {
			return nil
		}
		// Short of the limit: did the window stop at the end, or at its bound?
		var scanned int
		var last string
		if !f.ByStatus {
			if scanned = len(out); scanned > 0 {
				last = string(out[scanned-1].ID)
			}
		} else if err := tx.QueryRow(ctx, window, windowArgs...).Scan(&scanned, &last); err != nil {
			return err
		}
		if scanned == ledger.MaxPageScan {
			next = last
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// LeasePage implements txn.Queries. Active leases are read through the
// partial index of active leases (ended ones pile up), every lease through
// the primary key.
func (b *backend) LeasePage(ctx context.Context, active bool, after uint64, limit int) ([]ledger.Lease, string, error) {
	if after >= math.MaxInt64 {
		return nil, "", nil // no stored id follows the largest a bigint holds
	}
	query := "SELECT " + leaseColumns + " FROM leases WHERE id > $1 ORDER BY id LIMIT $2"
	if active {
		query = "SELECT " + leaseColumns + " FROM leases WHERE state = 1 AND id > $1 ORDER BY id LIMIT $2"
	}
	limit = min(limit, ledger.MaxPageScan)
	leases, err := collect(ctx, b.pool, scanLeaseOnly, query, int64(after), limit+1)
	if err != nil {
		return nil, "", err
	}
	page, next := txn.CutPage(leases, limit, func(l ledger.Lease) string { return strconv.FormatUint(l.ID, 10) })
	return page, next, nil
}

// UsagePage implements txn.Queries: newest first, so the cursor is the
// sequence number of the last (oldest) event listed.
func (b *backend) UsagePage(ctx context.Context, id core.AccountID, before uint64, limit int) (out []ledger.Usage, next string, err error) {
	limit = int(min(int64(limit), b.history))
	query := "SELECT seq, " + usageColumns + " FROM usage WHERE account = $1 ORDER BY seq DESC LIMIT $2"
	args := []any{string(id), limit + 1}
	if before != 0 {
		query = "SELECT seq, " + usageColumns + " FROM usage WHERE account = $1 AND seq < $3 ORDER BY seq DESC LIMIT $2"
		args = append(args, int64(min(before, math.MaxInt64)))
	}
	type numbered struct {
		seq int64
		u   ledger.Usage
	}
	var events []numbered
	err = b.view(ctx, func(tx pgx.Tx) (err error) {
		if _, err := readAccount(ctx, tx, id); err != nil {
			return err
		}
		events, err = collect(ctx, tx, func(row pgx.Row) (n numbered, err error) {
			n.u, err = scanUsage(row, id, &n.seq)
			return n, err
		}, query, args...)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	page, next := txn.CutPage(events, limit, func(n numbered) string { return strconv.FormatInt(n.seq, 10) })
	for _, n := range page {
		out = append(out, n.u)
	}
	return out, next, nil
}
