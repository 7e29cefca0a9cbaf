package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/ledger"
)

// Incarnations (migrations/0004): the nodes table holds each node id's
// current incarnation; leases keep their holder's grace.

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

// incarnation reads node's current incarnation (locking its row when lock
// is set); known is false if the ledger has none.
func (x *txn) incarnation(node string, lock bool) (i ledger.Incarnation, known bool, err error) {
	query := "SELECT " + incarnationColumns + " FROM nodes WHERE node = $1"
	if lock {
		query += " FOR UPDATE"
	}
	i, err = scanIncarnation(x.tx.QueryRow(x.ctx, query, node))
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Incarnation{}, false, nil
	}
	return i, err == nil, err
}

// graceOf is the grace a lease granted to holder keeps (ledger.GraceOf).
func (x *txn) graceOf(holder string) (int64, error) {
	node, _ := ledger.ParseHolder(holder)
	if validName("node", node) != nil {
		return ledger.NoGrace, nil // no incarnation can have stored it
	}
	cur, known, err := x.incarnation(node, false)
	if err != nil {
		return 0, err
	}
	return ledger.GraceOf(holder, cur, known), nil
}

const upsertIncarnationSQL = `INSERT INTO nodes (` + incarnationColumns + `) VALUES ($1, $2, $3, $4)
	ON CONFLICT (node) DO UPDATE SET incarnation = $2, grace = $3, started_at = $4`

// Incarnate implements ledger.Store (see ledger.Incarnate): the node's row
// is locked, so two starts of one id decide one after the other.
func (s *Store) Incarnate(ctx context.Context, node string, spool uint64, grace, now int64) (inc ledger.Incarnation, err error) {
	if err := ledger.ValidateIncarnate(node, grace); err != nil {
		return ledger.Incarnation{}, err
	}
	if err := validName("node", node); err != nil {
		return ledger.Incarnation{}, err
	}
	err = s.update(ctx, func(x *txn) error {
		cur, known, err := x.incarnation(node, true)
		if err != nil {
			return err
		}
		if inc, err = ledger.Incarnate(cur, known, node, spool, grace, now); err != nil {
			return err
		}
		var w writer
		n := w.int("incarnation", inc.Number)
		if w.err != nil {
			return w.err
		}
		_, err = x.tx.Exec(x.ctx, upsertIncarnationSQL, inc.Node, n, inc.Grace, inc.StartedAt)
		return err
	})
	if err != nil {
		return ledger.Incarnation{}, err
	}
	return inc, nil
}

// Incarnations implements ledger.Store.
func (s *Store) Incarnations(ctx context.Context) ([]ledger.Incarnation, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+incarnationColumns+" FROM nodes ORDER BY node")
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Incarnation, error) { return scanIncarnation(row) })
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// LeasesOf implements ledger.Store, through the partial index of leases
// not released by holder.
func (s *Store) LeasesOf(ctx context.Context, holder string) ([]ledger.Lease, error) {
	if validLabel("lease holder", holder) != nil {
		return nil, nil // no lease can have stored it
	}
	rows, err := s.pool.Query(ctx, "SELECT "+leaseColumns+" FROM leases WHERE holder = $1 AND state <> 2 ORDER BY id", holder)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Lease, error) {
		rec, err := scanLease(row)
		return rec.Lease, err
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}
