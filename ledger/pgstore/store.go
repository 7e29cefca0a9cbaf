// Package pgstore is the ledger on PostgreSQL: one database that every node
// of a fleet shares, with the same semantics as the embedded boltstore and
// passing the same conformance suite (ledgertest).
//
// Every method is one transaction, so a call that returns an error (a
// *ledger.Refusal from Acquire included) has changed nothing. The
// transaction scripts are package ledger/txn's and the money rules package
// ledger's, as boltstore's are, so the two agree by construction: a
// mutation locks the rows it touches, the rules change them in Go, and
// this package writes back what changed, set-wise (tx.go). Row-level CHECK
// constraints (migrations/) back the rules up in the database, and the
// reconciliation query (reconcile.sql, also run by Check) ties the rows
// together.
//
// Concurrency. Transactions run at READ COMMITTED and lock what they change,
// always in one global order, so that no two transactions wait for each
// other in a cycle:
//
//	event ids (sorted) → leases (by id) → accounts (by id) → counters
//
// Accounts are locked FOR NO KEY UPDATE (they never change their key), so
// rows that reference them (new leases, keys, children) still insert
// beside a lock. Maintenance picks its work FOR UPDATE SKIP LOCKED (Reclaim
// due leases, Rollover due accounts, ForgetEvents old ids), so it never
// waits for another node's pass and never does the same work twice: every
// node may run it at once. A rule applied under the lock is what makes it
// exactly once: a boundary another node already crossed is no longer due
// (ledger.RollOver moves nothing), a lease another node reclaimed is no
// longer active. Deadlocks and serialization failures are still retried,
// a bounded number of times (maxAttempts), should an operator's own
// transactions interleave.
//
// Range. Amounts, tokens and ids are uint64 in Go and bigint here: a value
// above 2^63−1 cannot be stored, and a change that would produce one is
// ledger.ErrOverflow and changes nothing (boltstore's limit is 2^64−1).
// Strings stored as text (key, token and deposit ids, key and token names,
// lease holders, audit fields) must be valid UTF-8 without NUL bytes, else
// ErrInvalid; names and holders are at most 256 bytes, as ids are. Ids
// are collated "C", so listings are in byte order, as boltstore's are,
// whatever the database's locale.
//
// Fleet. Configuration changes are appended to a change log in the
// transaction that makes them and announced with NOTIFY (changes.go), and
// so are the accounts whose funds moved (funds.go).
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// DefaultUsageHistory is how many accepted usage events UsageOf can return
// per account unless Options says otherwise (boltstore's default too).
const DefaultUsageHistory = txn.DefaultUsageHistory

// maxAttempts bounds how often one call runs its transaction when
// PostgreSQL aborts it for a deadlock or a serialization failure; the
// last failure is returned.
const maxAttempts = 8

// Options tune a store. The zero value is the production configuration.
type Options struct {
	// UsageHistory is how many of each account's most recent accepted usage
	// events are kept for UsageOf. 0 means DefaultUsageHistory.
	UsageHistory int
	// MaxConns bounds the connection pool; 0 means pgxpool's default
	// (the larger of 4 and the number of CPUs).
	MaxConns int32
}

// Store is a ledger.Store on a PostgreSQL database: the scripts of package
// ledger/txn over this package's rows, and what a fleet follows.
type Store struct {
	*txn.Store
	pool *pgxpool.Pool
	b    *backend
}

var _ ledger.Store = (*Store)(nil)

// backend is the database as the scripts use it (txn.Backend).
type backend struct {
	pool      *pgxpool.Pool
	connCfg   *pgx.ConnConfig // for the listeners' and the claim's own connections
	history   int64
	closeOnce sync.Once
}

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string) and brings its schema up to date (migrate.go). A
// database whose schema is newer than this build knows is refused with
// ErrSchemaTooNew, before anything is written to it.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	history, err := txn.UsageHistory(opts.UsageHistory)
	if err != nil || opts.MaxConns < 0 {
		return nil, fmt.Errorf("%w: usage history %d, max conns %d", ledger.ErrInvalid, opts.UsageHistory, opts.MaxConns)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "tollgated"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	b := &backend{pool: pool, connCfg: cfg.ConnConfig, history: int64(history)}
	return &Store{Store: txn.New(b), pool: pool, b: b}, nil
}

// Close closes the pool, waiting for connections in use. It is safe to
// call more than once.
func (b *backend) Close() error {
	b.closeOnce.Do(b.pool.Close)
	return nil
}

// Update implements txn.Backend: fn and then the write-back of what it
// changed run in one READ COMMITTED transaction.
func (b *backend) Update(ctx context.Context, fn func(txn.Tx) error) error {
	return b.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		x := &pgTx{ctx: ctx, tx: tx, history: b.history}
		if err := fn(x); err != nil {
			return err
		}
		return x.flush()
	})
}

// view runs fn in one read-only REPEATABLE READ transaction: every
// statement of fn sees the same snapshot.
func (b *backend) view(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return b.inTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// inTx runs fn in one transaction, committed if fn succeeds, and retried
// when PostgreSQL aborts it for a deadlock or a serialization failure.
func (b *backend) inTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	return b.retry(ctx, func() error {
		tx, err := b.pool.BeginTx(ctx, opts)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}

// retry runs attempt until it succeeds, fails for a reason a retry cannot
// cure, or maxAttempts ran; between attempts it backs off with jitter, so
// that the transactions that collided do not collide again.
func (b *backend) retry(ctx context.Context, attempt func() error) error {
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := mapError(attempt())
		if n == maxAttempts || !retryable(err) {
			return err
		}
		backoff := time.Duration(rand.Int64N(int64(time.Millisecond) << min(n, 6)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// PostgreSQL's error codes this package reacts to.
const (
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeNumericOutOfRange    = "22003"
)

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == codeSerializationFailure || pe.Code == codeDeadlockDetected)
}

// mapError turns a bigint overflow inside PostgreSQL into ErrOverflow.
func mapError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeNumericOutOfRange {
		return fmt.Errorf("%w: %w", ledger.ErrOverflow, err)
	}
	return err
}
