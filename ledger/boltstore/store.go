// Package boltstore is the embedded, durable ledger backend: one bbolt file
// holds every account, lease, usage event, key, token and audit record.
//
// Every mutation is one bbolt read-write transaction, committed (and
// fsync'd) before the call returns; a call that returns an error (a
// *ledger.Refusal from Acquire included) has changed nothing. bbolt runs
// one writer at a time, which is what makes the exactly-once rules (one
// rollover per boundary, one fencing token per grant, one record per event
// id) hold under concurrent callers. Reads run in parallel with it.
//
// The transaction scripts are package ledger/txn's, the money rules
// package ledger's: this package brings the rows they read and write
// (tx.go), with the indexes that follow from them, its reads (reads.go,
// pages.go) and its record encoding (codec.go).
//
// Storage decisions:
//   - Rollover and Reclaim walk indexes ordered by period end and by lease
//     expiry, so their cost follows what is due, not the store's size; a
//     periodic pass with nothing due writes nothing (Due).
//   - Lease ids come from one store-wide sequence; a consolidation whose
//     replacement was refused still commits, so ids may have gaps.
//   - Ingest records every event id with its verdict, rejected ones too,
//     until ForgetEvents drops it; UsageOf keeps each account's last
//     Options.UsageHistory accepted events.
//   - Deposit keys are kept per account with their units; a repeat is
//     recognised before any other check, even after the account closed.
//   - Listings (Accounts, Leases, Keys, PlatformTokens, AdminTokens and
//     the paged ListAccounts, ListLeases) are in id order; limits
//     (Rollover, Reclaim, UsageOf, AuditLog, ExpireKeys, pages) must be
//     positive. A page reads a bounded number of records (pages.go).
//   - Idempotent repeats (same spec, same budget, same deposit) commit an
//     empty transaction: cheap, and simpler than a read-then-write race.
package boltstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// Bucket names. Layout (keys → values):
//
//	meta      "schema" → schema version; "secretfp" → server secret fingerprint
//	accounts  account id → account
//	due       period end ⧺ account id → nil: accounts with a budget period, for Rollover
//	children  parent id ⧺ 0 ⧺ account id → nil: every account with a parent, for Children
//	deposits  account id ⧺ 0 ⧺ key → units: deposit idempotency
//	leases    lease id → lease record (the bucket's sequence assigns ids)
//	expiry    expires at ⧺ lease id → nil: active leases only, for Reclaim
//	events    usage event id → IngestResult: ingest idempotency
//	eventage  ingested at ⧺ event id → nil: every events entry, for ForgetEvents
//	usage     account id → bucket of sequence → usage: recent accepted usage
//	keys      key id → key;  keyindex  account id ⧺ 0 ⧺ key id → nil
//	keyexpiry expires at ⧺ key id → nil: live keys with an expiry, for ExpireKeys
//	tokens    platform token id → token
//	admintokens admin token id → admin token (the bootstrap one is "bootstrap")
//	marks     node id → the last spool sequence its settlements covered
//	          (the holder name of an incarnation: ledger.Incarnation.Holder)
//	nodes     node id → its current incarnation
//	held      holder ⧺ lease id → nil: leases not released, for LeasesOf
//	audit     sequence → audit record
var (
	bucketMeta     = []byte("meta")
	bucketAccounts = []byte("accounts")
	bucketDue      = []byte("due")
	bucketChildren = []byte("children")
	bucketDeposits = []byte("deposits")
	bucketLeases   = []byte("leases")
	bucketExpiry   = []byte("expiry")
	bucketEvents   = []byte("events")
	bucketEventAge = []byte("eventage")
	bucketUsage    = []byte("usage")
	bucketKeys     = []byte("keys")
	bucketKeyIndex = []byte("keyindex")
	bucketTokens   = []byte("tokens")
	bucketAudit    = []byte("audit")
	bucketKeyExp   = []byte("keyexpiry")
	bucketAdmins   = []byte("admintokens")
	bucketMarks    = []byte("marks")
	bucketNodes    = []byte("nodes")
	bucketHeld     = []byte("held")

	allBuckets = [][]byte{bucketMeta, bucketAccounts, bucketDue, bucketChildren, bucketDeposits, bucketLeases, bucketExpiry,
		bucketEvents, bucketEventAge, bucketUsage, bucketKeys, bucketKeyIndex, bucketKeyExp, bucketTokens, bucketAdmins, bucketAudit, bucketMarks,
		bucketNodes, bucketHeld}

	metaSchema = []byte("schema")
	metaSecret = []byte("secretfp")
	// metaAdmin held the one admin token digest of schema 1 and 2; schema 3
	// keeps it as the bootstrap admin token.
	metaAdmin = []byte("admin")
)

// schemaVersion is the layout above; Open upgrades a file of schema 1 (no
// children or event-age index), 2 (keys without name, expiry or last use;
// one admin token), 3 (accounts without Repaid, leases without Holder,
// and debts beside balances), 4 (usage history one record per event,
// which schema 5 reads beside its runs: history.go), 5 (no incarnations,
// no held index, leases without their grace: migrate.go) or 6 (admin
// tokens without a role: each is an admin) in the
// transaction that opens it, and refuses any other. The bump matters: an
// older build refuses a newer file instead of writing records its indexes
// miss or its rules would break (for schema 2, finding no admin token and
// generating a second one; for schema 4, failing on every usage run it
// reads; for schema 5, leases it cannot decode; for schema 6, admin tokens
// with a role, which it would take for all-powerful).
const schemaVersion = 7

// OpenTimeout is how long Open waits for the file lock: bbolt allows one
// process per file, and a second opener should fail fast and clearly, not
// hang.
const OpenTimeout = time.Second

// DefaultUsageHistory is how many accepted usage events UsageOf can return
// per account unless Options says otherwise.
const DefaultUsageHistory = txn.DefaultUsageHistory

// Options tune a store. The zero value is the production configuration.
type Options struct {
	// UsageHistory is how many of each account's most recent accepted usage
	// events are kept for UsageOf; older ones are deleted as new ones
	// arrive. 0 means DefaultUsageHistory.
	UsageHistory int
	// NoSync skips the fsync of every commit: a crash (of the machine, not
	// only the process) can then lose changes a call reported done. For
	// tests and fuzzing, which commit thousands of changes a second to
	// throw away; the daemon never sets it.
	NoSync bool
}

// Store is a ledger.Store over one bbolt file: the scripts of package
// ledger/txn over this package's rows.
type Store struct {
	*txn.Store
	db *bolt.DB
	b  *backend
}

var _ ledger.Store = (*Store)(nil)

// backend is the file as the scripts use it (txn.Backend).
type backend struct {
	db        *bolt.DB
	history   uint64
	closeOnce sync.Once
	closeErr  error
}

// ErrLocked reports a file another store (in this or another process)
// holds open.
var ErrLocked = errors.New("boltstore: ledger file is in use by another store")

// Open opens (creating if needed) the ledger file at path.
func Open(path string, opts Options) (*Store, error) {
	history, err := txn.UsageHistory(opts.UsageHistory)
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: OpenTimeout, NoSync: opts.NoSync, NoGrowSync: opts.NoSync})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (gave up after %s): %w", ErrLocked, path, OpenTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return upgrade(tx, path) }); err != nil {
		db.Close()
		return nil, err
	}
	b := &backend{db: db, history: uint64(history)}
	return &Store{Store: txn.New(b), db: db, b: b}, nil
}

// Close closes the file. It is safe to call more than once.
func (b *backend) Close() error {
	b.closeOnce.Do(func() { b.closeErr = b.db.Close() })
	return b.closeErr
}

// Update implements txn.Backend: one read-write transaction, committed
// and fsync'd when fn succeeds.
func (b *backend) Update(ctx context.Context, fn func(txn.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.db.Update(func(tx *bolt.Tx) error { return fn(&boltTx{tx: tx, history: b.history}) })
}

// view runs fn in one read-only transaction.
func (b *backend) view(ctx context.Context, fn func(x *boltTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.db.View(func(tx *bolt.Tx) error { return fn(&boltTx{tx: tx, history: b.history}) })
}

// dueIndexes are the time-ordered indexes of the periodic passes.
var dueIndexes = map[txn.DueWork][]byte{
	txn.DueRollover: bucketDue, txn.DueReclaim: bucketExpiry, txn.DueKeys: bucketKeyExp, txn.DueEvents: bucketEventAge,
}

// Due implements txn.DueChecker: whether what's index has an entry timed
// at or before t. The periodic passes ask in a read transaction first: a
// write transaction's commit is an fsync even when it changes nothing,
// and an idle node runs them every second.
func (b *backend) Due(ctx context.Context, what txn.DueWork, t int64) (bool, error) {
	found := false
	err := b.view(ctx, func(x *boltTx) error {
		k, _ := x.bucket(dueIndexes[what]).Cursor().First()
		found = k != nil && keyTime(k) <= t
		return nil
	})
	return found, err
}
