// Package txn writes the ledger's transaction scripts once: for every
// mutation of ledger.Store, what it reads and locks, which rule of package
// ledger it applies, and what it writes back. A backend brings its
// transactions (Backend.Update), the rows they read and write (Tx: one
// small interface per kind of row), and its reads (Queries, answered from
// its own indexes); Store is the ledger.Store made of them. So boltstore
// and pgstore cannot disagree about a script, as they cannot about a rule.
//
// Locks. A script locks what it will change before it changes it, in one
// global order — leases, then accounts, all of a call's accounts at once
// with their ancestors (Tx.LockAccounts) — so that two scripts running
// side by side (PostgreSQL's row locks) never wait for each other in a
// cycle; a backend with one writer at a time (bbolt) only reads there.
// The unit of work (work.go) holds what was locked, lets the rules mutate
// it in place, and writes back at the end only what changed.
//
// Fast paths. What only one backend can do is an optional interface the
// scripts detect: set-wise writes of every account and lease a script
// changed (BatchWriter), announcing whose funds moved (FundsAnnouncer),
// telling a periodic pass from a read that nothing is due (DueChecker),
// refusing strings the backend cannot store (TextChecker). How a backend
// picks due work — PostgreSQL's FOR UPDATE SKIP LOCKED, so that every node
// of a fleet may run a pass at once; bbolt's time-ordered indexes — is its
// own, behind the Due primitives.
package txn

import (
	"context"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// MaxNameLen bounds caller-chosen names (deposit keys, key and token ids,
// names and labels).
const MaxNameLen = 256

// DefaultUsageHistory is how many accepted usage events UsageOf can return
// per account unless a backend's options say otherwise.
const DefaultUsageHistory = 1000

// UsageHistory reads a backend's option of how many of each account's most
// recent accepted usage events it keeps: 0 means DefaultUsageHistory, and
// below 0 is ErrInvalid.
func UsageHistory(n int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: usage history %d", ledger.ErrInvalid, n)
	case n == 0:
		return DefaultUsageHistory, nil
	}
	return n, nil
}

// Backend is a ledger backend as the scripts use it.
type Backend interface {
	Queries
	// Update runs fn in one read-write transaction and commits what it
	// wrote if fn returns nil; an error rolls everything back. A backend
	// may run fn again on a fresh Tx (PostgreSQL retries a transaction it
	// aborted for a deadlock), so fn sets its results afresh each time.
	Update(ctx context.Context, fn func(Tx) error) error
}

// Queries are the reads of ledger.Store a backend answers from its own
// indexes, each from one snapshot. Store promotes them, and checks the
// arguments of the paged and bounded ones (AccountPage, LeasePage,
// UsagePage, AuditAfter) before it asks, and of those whose argument may
// be what no record can hold (Children and Ancestry an id that is not
// valid, LeasesOf and ExportMark text the backend cannot store); from
// Ancestry it derives the funding evidence.
type Queries interface {
	Account(ctx context.Context, id core.AccountID) (ledger.Account, error)
	Accounts(ctx context.Context) ([]ledger.Account, error)
	Children(ctx context.Context, id core.AccountID) ([]core.AccountID, error)
	// Ancestry reads id and its ancestors, leaf first (ReadAncestry).
	Ancestry(ctx context.Context, id core.AccountID) (ledger.Ancestry, error)
	// AccountPage is ListAccounts after the checks: after is "" or a
	// valid id, f.Parent "" or a valid id, limit positive.
	AccountPage(ctx context.Context, f ledger.AccountFilter, after string, limit int) ([]ledger.Account, string, error)
	Leases(ctx context.Context, active bool) ([]ledger.Lease, error)
	LeasesOf(ctx context.Context, holder string) ([]ledger.Lease, error)
	// LeasePage is ListLeases after the checks: the leases after the id
	// after (below the largest), limit positive.
	LeasePage(ctx context.Context, active bool, after uint64, limit int) ([]ledger.Lease, string, error)
	ExportMark(ctx context.Context, node string) (uint64, error)
	Incarnations(ctx context.Context) ([]ledger.Incarnation, error)
	// UsagePage reads id's recent accepted usage, newest first: up to
	// limit events (and no more than the backend's history holds) below
	// the sequence before (0: from the newest), and the cursor of what
	// follows. UsageOf and ListUsage call it after the checks: id valid,
	// limit positive.
	UsagePage(ctx context.Context, id core.AccountID, before uint64, limit int) ([]ledger.Usage, string, error)
	Keys(ctx context.Context, account core.AccountID) ([]ledger.Key, error)
	PlatformTokens(ctx context.Context) ([]ledger.PlatformToken, error)
	AdminTokens(ctx context.Context) ([]ledger.AdminToken, error)
	// StoredFingerprint reads the server secret's fingerprint as stored:
	// nil if none is; Store checks what it holds.
	StoredFingerprint(ctx context.Context) ([]byte, error)
	// AuditAfter is AuditLog after the checks: after below the largest
	// sequence, limit positive.
	AuditAfter(ctx context.Context, after uint64, limit int) ([]ledger.AuditRecord, error)
	Check(ctx context.Context) error
	Close() error
}

// Tx is one read-write transaction's rows. What a Lock or Due primitive
// returns is locked until the transaction ends (where the backend has row
// locks) and is written back, if a script changed it, through Put.
type Tx interface {
	AccountRows
	LeaseRows
	NodeRows
	EventRows
	CredentialRows
}

// AccountRows are accounts and their deposits.
type AccountRows interface {
	// Account reads id without locking it: ErrNotFound if there is none.
	Account(id core.AccountID) (ledger.Account, error)
	// LockAccounts locks and reads the accounts ids (valid, sorted, each
	// once) and all their ancestors, in id order; unknown ids are left out.
	LockAccounts(ids []core.AccountID) ([]ledger.Account, error)
	// DueAccounts locks and reads up to limit accounts with a budget
	// period that ended at or before now, earliest end first.
	DueAccounts(now int64, limit int) ([]ledger.Account, error)
	// InsertAccount stores a new account unless an account has its id:
	// inserted is false when another transaction created it first.
	InsertAccount(a *ledger.Account) (inserted bool, err error)
	// PutAccount writes an account a script changed; was is as it was
	// locked.
	PutAccount(was, now *ledger.Account) error
	// Deposit reads the units of account id's deposit under key; found is
	// false if there is none.
	Deposit(id core.AccountID, key string) (units core.CostUnits, found bool, err error)
	PutDeposit(id core.AccountID, key string, units core.CostUnits, now int64) error
}

// LeaseRows are leases.
type LeaseRows interface {
	// LockLeases locks and reads the leases ids (sorted, each once), in id
	// order; unknown ids are left out.
	LockLeases(ids []uint64) ([]ledger.LeaseRecord, error)
	// DueLeases locks and reads up to limit active leases whose
	// ledger.ReclaimableAt (with grace for those that keep none) is at or
	// before now, earliest first, then by id.
	DueLeases(now, grace int64, limit int) ([]ledger.LeaseRecord, error)
	// NextLeaseID draws the store-wide lease sequence.
	NextLeaseID() (uint64, error)
	// PutLease writes a lease a script granted (was is nil) or changed.
	PutLease(was, now *ledger.LeaseRecord) error
}

// NodeRows are the nodes' incarnations and export marks.
type NodeRows interface {
	// Incarnation reads node's current incarnation, locking it when lock
	// is set; known is false if the ledger has none.
	Incarnation(node string, lock bool) (i ledger.Incarnation, known bool, err error)
	PutIncarnation(i *ledger.Incarnation) error
	// TakeMark reads node's export mark (0 if it never settled), locking
	// it: a node's settlements run one at a time.
	TakeMark(node string, now int64) (uint64, error)
	// PutMark moves node's mark from from, which TakeMark read, to to.
	PutMark(node string, from, to uint64, now int64) error
}

// EventRows are the ingested event ids and the accounts' recent usage.
type EventRows interface {
	// ClaimEvents records every id of ids (each once) not seen before as
	// ingested at now, and reports which it recorded: claimed[i] answers
	// ids[i]. A recorded id is accepted unless RejectEvents says otherwise.
	ClaimEvents(ids [][16]byte, now int64) (claimed []bool, err error)
	RejectEvents(ids [][16]byte) error
	// ForgetEvents drops up to limit ids ingested before before, oldest
	// first, and reports how many.
	ForgetEvents(before int64, limit int) (int, error)
	// RecordUsage adds history, the events a transaction billed in the
	// order it billed them, to their accounts' recent usage (each account
	// keeps its last ones, as many as the backend's history holds), and
	// totals to the usage totals if the backend keeps them.
	RecordUsage(history []*ledger.Usage, totals []UsageTotal) error
}

// CredentialRows are keys, platform and admin tokens, the server secret's
// fingerprint and the audit trail.
type CredentialRows interface {
	Keys() Table[ledger.Key]
	PlatformTokens() Table[ledger.PlatformToken]
	AdminTokens() Table[ledger.AdminToken]
	// DueKeys locks and reads up to limit live keys whose ExpiresAt is
	// not 0 and at most now, earliest expiry first, then by id.
	DueKeys(now int64, limit int) ([]ledger.Key, error)
	// MarkKeysUsed raises each named key's LastUsed to its At, never
	// lowering it; unknown ids are skipped.
	MarkKeysUsed(uses []ledger.KeyUse) error
	// InsertSecretFingerprint stores fp unless a fingerprint is stored.
	InsertSecretFingerprint(fp [32]byte) (stored bool, err error)
	// AppendAudit stores r under the next audit sequence number (from 1)
	// and returns it.
	AppendAudit(r *ledger.AuditRecord) (uint64, error)
}

// Table is a backend's records of one kind, by id.
type Table[T any] interface {
	// Insert stores rec unless a record has its id; then it returns that
	// record, and inserted is false.
	Insert(rec *T) (stored T, inserted bool, err error)
	// Lock locks and reads record id: ErrNotFound if there is none.
	Lock(id string) (T, error)
	// Put writes a record Lock read; was is as it was read.
	Put(was, now *T) error
}

// UsageTotal is what one transaction billed of one account's usage from
// one source: Units units in Events events (the events it knows of: a
// settlement without history counts none).
type UsageTotal struct {
	Account core.AccountID
	Source  ledger.UsageSource
	Events  uint64
	Units   core.CostUnits
}

// AccountWrite and LeaseWrite are one changed record for a BatchWriter:
// Was as it was locked (nil for a new lease), Now as the script left it.
type (
	AccountWrite struct{ Was, Now *ledger.Account }
	LeaseWrite   struct{ Was, Now *ledger.LeaseRecord }
)

// BatchWriter is a Tx that writes many records in one statement
// (PostgreSQL: UPDATE … FROM unnest): it is given every account, then
// every lease, a script changed, each in id order, instead of one Put
// each.
type BatchWriter interface {
	PutAccounts(w []AccountWrite) error
	PutLeases(w []LeaseWrite) error
}

// FundsAnnouncer is a Tx whose backend tells others whose funds moved
// (PostgreSQL's NOTIFY, for a fleet's other nodes). It is given, once per
// transaction, the accounts whose ledger.Spendable the transaction changed,
// in id order, leaving out those below another of them: the evidence of an
// account and of everything below it may have moved, of nothing above it.
type FundsAnnouncer interface {
	AnnounceFunds(ids []core.AccountID) error
}

// DueWork names a periodic pass.
type DueWork uint8

const (
	DueRollover DueWork = iota + 1 // accounts whose period ended (Rollover)
	DueReclaim                     // leases past their expiry (Reclaim)
	DueKeys                        // keys past their expiry (ExpireKeys)
	DueEvents                      // event ids old enough to forget (ForgetEvents)
)

// DueChecker is a backend whose write transactions cost something even
// when they change nothing (bbolt commits with an fsync): a periodic pass
// asks it first, in a read, whether anything of what is timed at or before
// t may be due, and writes nothing when it says no.
type DueChecker interface {
	Due(ctx context.Context, what DueWork, t int64) (bool, error)
}

// TextChecker is a backend that stores caller-chosen strings as text
// (PostgreSQL): CheckText refuses, with ErrInvalid, a string it cannot
// hold, or one longer than max bytes when max is not 0. A backend without
// it stores any bytes.
type TextChecker interface {
	CheckText(what, s string, max int) error
}
