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
// The money itself moves only through the rules in package ledger; this
// package loads the accounts and leases a call touches, applies a rule, and
// writes back what changed together with the indexes it maintains (see
// txn.go). Record encoding is described in codec.go.
//
// Storage decisions:
//   - Rollover and Reclaim walk indexes ordered by period end and by lease
//     expiry, so their cost follows what is due, not the store's size.
//   - Lease ids come from one store-wide sequence; a consolidation whose
//     replacement was refused still commits, so ids may have gaps.
//   - Ingest records every event id with its verdict, rejected ones too,
//     and keeps them forever (there is no pruning horizon yet); UsageOf
//     keeps each account's last Options.UsageHistory accepted events.
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
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
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
//	nodes     node id → its current incarnation (incarnations.go)
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
// no held index, leases without their grace: incarnations.go) or 6 (admin
// tokens without a role: each is an admin) in the
// transaction that opens it, and refuses any other. The bump matters: an
// older build refuses a newer file instead of writing records its indexes
// miss or its rules would break (for schema 2, finding no admin token and
// generating a second one; for schema 4, failing on every usage run it
// reads; for schema 5, leases it cannot decode; for schema 6, admin tokens
// with a role, which it would take for all-powerful).
const schemaVersion = 7

// migrateFrom3 settles the debts schemas up to 3 let stand beside a
// balance: schema 4 repays overage from arriving funds first (ledger.Repay), and
// L1 now refuses an account that owes while holding a balance.
func migrateFrom3(tx *bolt.Tx) error {
	b := tx.Bucket(bucketAccounts)
	type change struct {
		id []byte
		v  []byte
	}
	var changes []change
	err := b.ForEach(func(k, v []byte) error {
		a, err := decodeAccount(k, v)
		if err != nil {
			return err
		}
		if a.Overage == 0 || a.Balance() == 0 {
			return nil
		}
		fromTopUp := min(a.Overage, a.TopUpLeft)
		a.TopUpLeft -= fromTopUp
		if err := ledger.Repay(&a, &a.TopUpLeft, fromTopUp); err != nil {
			return err
		}
		fromAllowance := min(a.Overage, a.AllowanceLeft)
		a.AllowanceLeft -= fromAllowance
		if err := ledger.Repay(&a, &a.AllowanceLeft, fromAllowance); err != nil {
			return err
		}
		if err := a.Conserved(); err != nil {
			return err
		}
		changes = append(changes, change{bytes.Clone(k), encodeAccount(&a)})
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range changes {
		if err := b.Put(c.id, c.v); err != nil {
			return err
		}
	}
	return nil
}

// migrateFrom1 builds the indexes schema 2 added. A schema-1 file kept no
// ingest times, so its event ids count as ingested at now.
func migrateFrom1(tx *bolt.Tx, now int64) error {
	if tx.Bucket(bucketChildren) == nil {
		if err := indexChildren(tx); err != nil {
			return err
		}
	}
	if tx.Bucket(bucketEventAge) == nil {
		if err := indexEventAges(tx, now); err != nil {
			return err
		}
	}
	return nil
}

// migrateFrom2 rewrites every key in schema 3's layout (none had an
// expiry, so the expiry index starts empty) and turns the one admin token
// digest into the bootstrap admin token.
func migrateFrom2(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketKeyExp); err != nil {
		return err
	}
	admins, err := tx.CreateBucketIfNotExists(bucketAdmins)
	if err != nil {
		return err
	}
	keys, err := tx.CreateBucketIfNotExists(bucketKeys)
	if err != nil {
		return err
	}
	var rewritten [][2][]byte
	err = keys.ForEach(func(id, v []byte) error {
		k, err := decodeSchema2Key(id, v)
		if err != nil {
			return err
		}
		rewritten = append(rewritten, [2][]byte{bytes.Clone(id), encodeKey(&k)})
		return nil
	})
	if err != nil {
		return err
	}
	for _, kv := range rewritten { // not inside ForEach: bbolt forbids writes while iterating
		if err := keys.Put(kv[0], kv[1]); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	d := meta.Get(metaAdmin)
	if d == nil {
		return nil
	}
	if len(d) != 32 {
		return fmt.Errorf("%w: admin token digest of %d bytes", ErrCorrupt, len(d))
	}
	t := ledger.AdminToken{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: [32]byte(d), Role: ledger.RoleAdmin}
	if err := admins.Put([]byte(t.ID), encodeAdminToken(&t)); err != nil {
		return err
	}
	return meta.Delete(metaAdmin)
}

// OpenTimeout is how long Open waits for the file lock: bbolt allows one
// process per file, and a second opener should fail fast and clearly, not
// hang.
const OpenTimeout = time.Second

// DefaultUsageHistory is how many accepted usage events UsageOf can return
// per account unless Options says otherwise.
const DefaultUsageHistory = 1000

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

// Store is a ledger.Store over one bbolt file.
type Store struct {
	db        *bolt.DB
	history   uint64
	closeOnce sync.Once
	closeErr  error
}

var _ ledger.Store = (*Store)(nil)

// ErrLocked reports a file another store (in this or another process)
// holds open.
var ErrLocked = errors.New("boltstore: ledger file is in use by another store")

// Open opens (creating if needed) the ledger file at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.UsageHistory < 0 {
		return nil, fmt.Errorf("%w: usage history %d", ledger.ErrInvalid, opts.UsageHistory)
	}
	if opts.UsageHistory == 0 {
		opts.UsageHistory = DefaultUsageHistory
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: OpenTimeout, NoSync: opts.NoSync, NoGrowSync: opts.NoSync})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (gave up after %s): %w", ErrLocked, path, OpenTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		var schema []byte
		if meta := tx.Bucket(bucketMeta); meta != nil {
			schema = meta.Get(metaSchema)
		}
		switch {
		case schema == nil: // a new file
		case string(schema) == string(u64Key(1)):
			if err := migrateFrom1(tx, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("boltstore: %s: upgrading schema 1: %w", path, err)
			}
			fallthrough
		case string(schema) == string(u64Key(2)):
			if err := migrateFrom2(tx); err != nil {
				return fmt.Errorf("boltstore: %s: upgrading schema 2: %w", path, err)
			}
			fallthrough
		case string(schema) == string(u64Key(3)):
			if err := migrateFrom3(tx); err != nil {
				return fmt.Errorf("boltstore: %s: upgrading schema 3: %w", path, err)
			}
			fallthrough
		case string(schema) == string(u64Key(4)), string(schema) == string(u64Key(5)):
			// Schema 5 reads schema 4's per-event usage records beside its
			// runs: nothing to rewrite for them.
			if err := migrateFrom5(tx); err != nil {
				return fmt.Errorf("boltstore: %s: upgrading schema 5: %w", path, err)
			}
		case string(schema) == string(u64Key(6)):
			// Schema 7 gave admin tokens a role; a token of schema 6 reads
			// as an admin (codec.go): nothing to rewrite.
		case string(schema) != string(u64Key(schemaVersion)):
			return fmt.Errorf("boltstore: %s has schema %x, this build reads %d", path, schema, schemaVersion)
		}
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(schemaVersion))
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db, history: uint64(opts.UsageHistory)}, nil
}

// Close closes the file. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}

// update runs fn in one read-write transaction over a fresh txn cache and,
// if fn succeeds, writes back every account and lease it changed before
// committing. An error from fn rolls everything back.
func (s *Store) update(ctx context.Context, fn func(x *txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		x := newTxn(tx)
		if err := fn(x); err != nil {
			return err
		}
		return x.flush()
	})
}

// view runs fn in one read-only transaction.
func (s *Store) view(ctx context.Context, fn func(x *txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(func(tx *bolt.Tx) error { return fn(newTxn(tx)) })
}
