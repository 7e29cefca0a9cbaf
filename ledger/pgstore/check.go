package pgstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/ledger"
)

// ReconcileSQL is the reconciliation query docs/POSTGRES.md gives
// operators: each row it returns is a broken invariant.
//
//go:embed reconcile.sql
var ReconcileSQL string

// Finding is one row of the reconciliation query.
type Finding struct {
	Rule    string // e.g. "L2 outstanding", "settled vs usage"
	Account string
	Lease   uint64 // 0 unless the rule is about one lease
	Detail  string
}

func (f Finding) String() string {
	if f.Lease != 0 {
		return fmt.Sprintf("%s: account %s, lease %d: %s", f.Rule, f.Account, f.Lease, f.Detail)
	}
	return fmt.Sprintf("%s: account %s: %s", f.Rule, f.Account, f.Detail)
}

// Reconcile runs the reconciliation query and returns what it found
// (nothing on a sound ledger).
func (s *Store) Reconcile(ctx context.Context) (out []Finding, err error) {
	err = s.b.view(ctx, func(tx pgx.Tx) error {
		out, err = reconcile(ctx, tx)
		return err
	})
	return out, err
}

func reconcile(ctx context.Context, tx pgx.Tx) ([]Finding, error) {
	return collect(ctx, tx, func(row pgx.Row) (f Finding, err error) {
		var lease *int64
		err = row.Scan(&f.Rule, &f.Account, &lease, &f.Detail)
		if lease != nil {
			f.Lease = uint64(*lease)
		}
		return f, err
	}, ReconcileSQL)
}

// Check implements ledger.Store on one snapshot: it streams every lease
// and then every account through ledger.Conservation (L1–L5, as boltstore
// does; a violation wraps ledger.ErrNotConserved), then runs the
// reconciliation query, which checks the same invariants in SQL and the
// usage ingested against Settled; any row it returns wraps
// ledger.ErrNotConserved too.
func (b *backend) Check(ctx context.Context) error {
	return b.view(ctx, func(tx pgx.Tx) error {
		err := ledger.CheckConservation(func(lease func(*ledger.LeaseRecord) error) error {
			return eachRow(ctx, tx, "SELECT "+leaseColumns+" FROM leases ORDER BY id", scanLease, lease)
		}, func(account func(*ledger.Account) error) error {
			return eachRow(ctx, tx, "SELECT "+accountColumns+" FROM accounts ORDER BY id", scanAccount, account)
		})
		if err != nil {
			return err
		}
		found, err := reconcile(ctx, tx)
		if err != nil {
			return err
		}
		if len(found) > 0 {
			return fmt.Errorf("%w: reconciliation found %d problems, the first: %s", ledger.ErrNotConserved, len(found), found[0])
		}
		return nil
	})
}

// eachRow runs query and calls fn with each row, scanned, streaming.
func eachRow[T any](ctx context.Context, tx pgx.Tx, query string, scan func(pgx.Row) (T, error), fn func(*T) error) error {
	rows, err := tx.Query(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		rec, err := scan(rows)
		if err != nil {
			return err
		}
		if err := fn(&rec); err != nil {
			return err
		}
	}
	return rows.Err()
}
