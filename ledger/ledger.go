// Package ledger keeps money exactly and durably: accounts and their
// hierarchy, budgets and deposits, leases that fund the shards, idempotent
// usage ingest, and the keys, tokens and audit trail the admin API manages.
//
// Every account obeys, after every transaction (invariant L1):
//
//	Deposited + Overage == Balance + Outstanding + Settled + Loss + Expired
//
// where Balance = AllowanceLeft + TopUpLeft. Store is the interface every
// backend implements; ledgertest holds the conformance suite they all pass.
// Time is always an argument (Unix ns): stores read no clock.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/tollgated/tollgated/core"
)

// Period is how often a budget's allowance renews, on UTC boundaries. It is
// core's type, so funding evidence can carry it to the data plane (seed
// 000's "window").
type Period = core.BudgetPeriod

const (
	PeriodNone  = core.PeriodNone  // no allowance; top-ups only
	PeriodDay   = core.PeriodDay   // 00:00 UTC each day
	PeriodWeek  = core.PeriodWeek  // 00:00 UTC each Monday
	PeriodMonth = core.PeriodMonth // 00:00 UTC on the 1st
)

// Budget is an account's renewing allowance.
type Budget struct {
	Allowance core.CostUnits
	Period    Period
}

// AccountSpec is what creates an account. Creation is idempotent: the same
// spec again returns the existing account; a different spec for an existing
// id is ErrConflict and changes nothing.
type AccountSpec struct {
	ID       core.AccountID
	Parent   core.AccountID // "" for a root; the parent must exist
	Capacity core.CapacityClass
	// Unmetered accounts hold no money of their own: their charges are
	// funded by their metered ancestors only. A root must be metered, so
	// every charge is bounded by at least one balance.
	Unmetered bool
}

// Account is the ledger's view of one account.
type Account struct {
	AccountSpec
	Scope  core.Scope // agent, workspace or org: its depth in the hierarchy
	Status core.Status
	// Policy is the admin API's policy document, stored verbatim; the
	// ledger does not interpret it. PolicyGeneration increases by one with
	// every policy, status or capacity change, so published snapshots can
	// be ordered.
	Policy           []byte
	PolicyGeneration uint64
	Budget           Budget

	// Money, in units. See the package comment for the equation.
	Deposited     core.CostUnits // top-ups plus every allowance ever granted
	Overage       core.CostUnits // debt: usage billed beyond funding (elastic, post-paid) not yet repaid
	AllowanceLeft core.CostUnits // this period's allowance not yet leased or spent
	TopUpLeft     core.CostUnits // top-ups not yet leased or spent
	Outstanding   core.CostUnits // granted to active leases, not yet settled or returned
	Settled       core.CostUnits // billed usage
	Loss          core.CostUnits // forfeited by ended leases (reclaimed, or released with a gap); late usage turns it into Settled
	Expired       core.CostUnits // allowance left over at a period's end
	// Repaid counts overage that funds arriving later (deposits, new
	// allowances, units a release credits) paid off. It is history, not a
	// term of L1: repaying moves units from the arriving funds to Overage's
	// reduction, so Overage + Repaid is every unit ever billed unfunded.
	Repaid core.CostUnits

	PeriodStart, PeriodEnd int64 // current budget period; both 0 when PeriodNone
	NextToken              uint64
}

// Balance is what the account can still lease or spend on its own.
func (a *Account) Balance() core.CostUnits { return a.AllowanceLeft + a.TopUpLeft }

// Conserved checks invariant L1 for a, with checked arithmetic.
func (a *Account) Conserved() error {
	lhs, err := a.Deposited.Add(a.Overage)
	if err != nil {
		return err
	}
	rhs := a.AllowanceLeft
	for _, t := range []core.CostUnits{a.TopUpLeft, a.Outstanding, a.Settled, a.Loss, a.Expired} {
		if rhs, err = rhs.Add(t); err != nil {
			return err
		}
	}
	if lhs != rhs {
		return fmt.Errorf("%w: account %s: deposited %d + overage %d != balance %d+%d + outstanding %d + settled %d + loss %d + expired %d",
			ErrNotConserved, a.ID, a.Deposited, a.Overage, a.AllowanceLeft, a.TopUpLeft, a.Outstanding, a.Settled, a.Loss, a.Expired)
	}
	// Funds that arrive repay debt first (see Repay), so an account in
	// debt has no balance: a balance beside a debt would admit work the
	// debt should stop.
	if a.Overage > 0 && (a.AllowanceLeft > 0 || a.TopUpLeft > 0) {
		return fmt.Errorf("%w: account %s owes overage %d but holds balance %d+%d",
			ErrNotConserved, a.ID, a.Overage, a.AllowanceLeft, a.TopUpLeft)
	}
	return nil
}

// LeaseState is where a lease is in its life.
type LeaseState uint8

const (
	LeaseActive    LeaseState = iota + 1
	LeaseReleased             // returned by its holder; unspent units credited (also after a forfeit: see Release)
	LeaseReclaimed            // expired unreleased; remainder forfeited as loss
)

// Lease is funding granted to a node for one account. Units were taken from
// the account and from each metered ancestor (see LeaseRecord.Funding).
type Lease struct {
	ID        uint64 // unique in the store
	Account   core.AccountID
	Holder    string // the node that holds it (its --node-id): after a crash it alone may release it
	Token     uint64 // fencing token: strictly increasing per account, from 1
	Granted   core.CostUnits
	Used      core.CostUnits // usage settled against it
	Credited  core.CostUnits // unspent units returned by a release
	State     LeaseState
	GrantedAt int64
	ExpiresAt int64 // usable until ExpiresAt; reclaimable after ExpiresAt + grace
	// Grace is its holder's --lease-grace when it was granted (the
	// holder's Incarnation.Grace), or NoGrace: it is forfeited Grace after
	// ExpiresAt by whichever node reclaims it, so a dead node's leases
	// keep the grace it chose (ReclaimableAt).
	Grace int64
}

// Evidence is what the ledger attests about an account's funding at a grant
// or refusal: Remaining is an upper bound on what the account can still
// spend (the tightest metered scope's balance plus its outstanding leases),
// as of the scope's PeriodEnd (0: no period).
type Evidence = core.FundingEvidence

// Refusal is returned (as error) when a lease cannot be granted; it names
// the scope that refused and carries the evidence.
type Refusal struct {
	Reason   RefusalReason
	Account  core.AccountID // the account (self or ancestor) that refused
	Evidence Evidence
}

// RefusalReason says why a grant was refused.
type RefusalReason uint8

const (
	RefusedExhausted    RefusalReason = iota + 1 // a scope's balance is 0
	RefusedInsufficient                          // a scope cannot fund the needed quote
	RefusedInactive                              // the account or an ancestor is suspended or closed
)

func (r *Refusal) Error() string {
	return fmt.Sprintf("ledger: grant refused by %s (%s): remaining %d", r.Account, r.Evidence.Scope, r.Evidence.Remaining)
}

// UsageSource says what funded a usage record.
type UsageSource uint8

const (
	UsageLease    UsageSource = iota + 1 // a lease: LeaseID and Token must match it
	UsageOverage                         // elastic overage beyond the lease
	UsagePostPaid                        // reported after the fact (seed 000 POST /v1/usage)
)

// Usage is one billed event. ID makes ingest idempotent.
type Usage struct {
	ID         [16]byte
	Account    core.AccountID
	Source     UsageSource
	LeaseID    uint64
	Token      uint64
	Units      core.CostUnits
	OccurredAt int64
}

// LeaseUsage is usage summed over many events: against one lease (LeaseID
// and Token), or, for elastic overage, against the account alone.
type LeaseUsage struct {
	Account        core.AccountID
	LeaseID, Token uint64
	Units          core.CostUnits
}

// Settlement is one export pass of a node: the data-plane usage of its
// spool records From+1 … To folded into totals, one per lease and one per
// account's elastic overage. It bills in one transaction what the events
// would have billed one by one; exactly once comes from the node's export
// mark, which it moves from From to To, not from remembering event ids.
type Settlement struct {
	Node     string
	From, To uint64 // spool sequences: From exclusive, To inclusive
	Leases   []LeaseUsage
	Overage  []LeaseUsage // LeaseID and Token 0
	Events   uint64       // records folded, for the caller's counts
	// History is the batch's events, in spool order, for the accounts'
	// recent usage (Store.UsageOf): what the settlement billed of them is
	// recorded (BilledEvents), nothing is indexed by event id. Optional;
	// its units need not add up to the totals.
	History []Usage
}

// SettleResult is what a Settlement did.
type SettleResult struct {
	// Duplicate: the node's mark was already at or past To (a batch
	// replayed after a crash): nothing was applied.
	Duplicate bool
	// Accepted and Rejected units: lease usage beyond what its lease can
	// take (see SettleLease), or against no lease of its account, is
	// rejected, as the events would have been.
	Accepted, Rejected core.CostUnits
}

// Add counts accepted and rejected units into r.
func (r *SettleResult) Add(accepted, rejected core.CostUnits) error {
	a, err := r.Accepted.Add(accepted)
	if err != nil {
		return fmt.Errorf("%w: settlement accepted units", err)
	}
	b, err := r.Rejected.Add(rejected)
	if err != nil {
		return fmt.Errorf("%w: settlement rejected units", err)
	}
	r.Accepted, r.Rejected = a, b
	return nil
}

// IngestResult is what ingest did with one event, exactly once per ID.
type IngestResult uint8

const (
	Accepted IngestResult = iota + 1
	Duplicate
	Rejected // unknown account or lease, token mismatch, or no lease capacity left
)

// Key is an API key record. The secret is never stored: only its digest.
type Key struct {
	ID        string
	Account   core.AccountID
	Name      string // the operator's label; not unique, may be empty
	Digest    [32]byte
	CreatedAt int64
	// ExpiresAt, when not 0, is when the key stops working: ExpireKeys
	// revokes it at the first call at or after it.
	ExpiresAt int64
	// LastUsed is the latest time MarkKeysUsed reported for the key, 0 if
	// none: coarse by design (the data plane reports in batches).
	LastUsed int64
	Revoked  bool
}

// KeyUse reports that key ID was used at At (see MarkKeysUsed).
type KeyUse struct {
	ID string
	At int64
}

// AdminToken is a credential of the admin API. Like keys, only the
// token's digest is stored (SHA-256: admin tokens are checked on the admin
// listener only, without the server secret).
type AdminToken struct {
	ID        string
	Name      string
	Digest    [32]byte
	CreatedAt int64
	Revoked   bool
	// Role is one of the AdminRoles: what the token may do is the admin
	// API's business, the ledger keeps the name with the token. A token
	// stored before roles existed is RoleAdmin, as is the bootstrap token.
	Role string
}

// The admin token roles, from the most powerful down.
const (
	RoleAdmin    = "admin"    // everything
	RoleOperator = "operator" // accounts, budgets, deposits, keys
	RoleViewer   = "viewer"   // reads
	RoleMetrics  = "metrics"  // /metrics only
)

// AdminRoles are the roles an admin token may have.
var AdminRoles = []string{RoleAdmin, RoleOperator, RoleViewer, RoleMetrics}

// ValidRole reports whether role is one of AdminRoles.
func ValidRole(role string) bool { return slices.Contains(AdminRoles, role) }

// BootstrapAdminTokenID is the id of the admin token SetAdminTokenDigest
// stores: the one the daemon is first started with (from its environment,
// or generated). It lists and revokes like any other admin token.
const BootstrapAdminTokenID = "bootstrap"

// Page asks for one page of a listing: at most Limit (≥ 1) items after the
// cursor After, which is "" for the first page and otherwise the next
// cursor the previous page of the same listing returned. Cursors belong to
// the backend (callers pass them back verbatim) and stay valid across
// restarts. A page may hold fewer than Limit items and still have a next
// cursor (a backend bounds the work one page does); the listing ends only
// when the next cursor is "".
type Page struct {
	After string
	Limit int
}

// MaxPageScan bounds what one page of a backend reads: a page holds at
// most this many items whatever its limit, and a filter that matches
// little (suspended accounts among millions) answers a short page with a
// cursor, never one long scan.
const MaxPageScan = 4096

// Check refuses a page no listing accepts (ErrInvalid): a limit below 1.
func (p Page) Check() error {
	if p.Limit <= 0 {
		return fmt.Errorf("%w: page limit %d", ErrInvalid, p.Limit)
	}
	return nil
}

// SeqCursor reads a cursor that is a decimal sequence number (a lease id,
// a usage sequence); "" is 0.
func SeqCursor(after string) (uint64, error) {
	if after == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(after, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: cursor %q", ErrInvalid, after)
	}
	return n, nil
}

// AccountFilter narrows ListAccounts; its zero value lists every account.
type AccountFilter struct {
	Parent core.AccountID // only this account's children; "" for any
	// ByStatus lists only accounts in Status (core.StatusActive is 0, so
	// the zero Status cannot mean "any").
	ByStatus bool
	Status   core.Status
}

// PlatformToken authorizes seed-000 callers (agent runtimes).
type PlatformToken struct {
	ID        string
	Digest    [32]byte
	CreatedAt int64
	Revoked   bool
}

// AuditRecord is one admin mutation with its before and after state.
type AuditRecord struct {
	Seq    uint64 // assigned by the store, increasing
	At     int64
	Actor  string
	Action string
	Target string
	Before []byte // JSON, nil when there was nothing before
	After  []byte
}

// Store is a ledger backend: what each of its consumers uses, composed.
// All methods are safe for concurrent use and each mutation is one atomic,
// durable transaction: it returns only after the change is on disk, and a
// failed call changes nothing. The transaction scripts are written once
// (package ledger/txn) over each backend's row-shaped primitives.
type Store interface {
	FundingStore
	UsageStore
	AdminStore
	CredentialStore
	// Check verifies L1 for every account and the lease totals against
	// each account's Outstanding.
	Check(ctx context.Context) error
	Close() error
}

// FundingStore is what funds the data plane: node leases (acquire, extend,
// release, reclaim), budget rollover, funding evidence, and the node
// incarnations the leases are held under. The control plane's funder,
// recovery and maintenance use it.
type FundingStore interface {
	// Acquire grants holder a new lease of up to want units (at least need
	// when the balance can fund it), usable for ttl. A refusal is a
	// *Refusal. The lease keeps the grace the holder's incarnation
	// registered (Incarnate) if holder is the node's current incarnation,
	// NoGrace otherwise (GraceOf).
	Acquire(ctx context.Context, id core.AccountID, holder string, want, need core.CostUnits, ttl, now int64) (Lease, Evidence, error)
	// Extend grows an active lease by up to want more units (need when the
	// balance can fund it; none when it cannot, which is not an error) and
	// moves its expiry to now+ttl, in one transaction: a busy holder keeps
	// one lease for as long as it is busy. It returns the lease as it now
	// is. A suspended or closed chain is a *Refusal{RefusedInactive} and
	// changes nothing; a lease whose funders moved to a new budget period
	// since its grant is ErrPeriodEnded (acquire a successor instead).
	Extend(ctx context.Context, leaseID, token uint64, want, need core.CostUnits, ttl, now int64) (Lease, Evidence, error)
	// Release credits unspent (≤ Granted − Used) and ends the lease. A
	// lease already forfeited (Reclaim) is restored the same way: its
	// holder, which alone knows the token, was alive and out of reach of
	// the ledger, and unspent comes back out of Loss (see ledger.Release).
	Release(ctx context.Context, leaseID, token uint64, unspent core.CostUnits, now int64) error
	// Reclaim ends up to limit active leases past their ReclaimableAt
	// (ExpiresAt + the lease's own Grace, or + grace for a lease that
	// keeps none), earliest first, forfeiting each remainder as loss. It
	// reports how many.
	Reclaim(ctx context.Context, now, grace int64, limit int) (int, error)
	// Rollover moves up to limit accounts whose period ended into the
	// current one, exactly once per boundary.
	Rollover(ctx context.Context, now int64, limit int) (int, error)
	Leases(ctx context.Context, active bool) ([]Lease, error)
	// LeasesOf lists the leases holder still answers for, in id order: its
	// active ones and those forfeited and not restored (state
	// LeaseReclaimed), which its Release restores.
	LeasesOf(ctx context.Context, holder string) ([]Lease, error)
	// Evidence reports id's funding as admission would see it.
	Evidence(ctx context.Context, id core.AccountID) (Evidence, error)
	// Incarnate records a start of node, in one transaction, and returns
	// the incarnation it starts as (the rules: ledger.Incarnate). spool is
	// the incarnation its data directory's spool belongs to, 0 for an
	// empty data directory; grace is the node's --lease-grace, which the
	// leases it acquires from now on keep. A refusal is an
	// *IncarnationError and changes nothing.
	Incarnate(ctx context.Context, node string, spool uint64, grace, now int64) (Incarnation, error)
	// Incarnations lists the current incarnation of every node id the
	// ledger knows, in id order.
	Incarnations(ctx context.Context) ([]Incarnation, error)
}

// UsageStore is what bills usage: post-paid ingest, settlement of a node's
// spooled usage under its export mark, and the accounts' recent usage.
// The exporter, recovery and the plane's post-paid path use it.
type UsageStore interface {
	// Ingest records a batch: results[i] answers events[i]. An error means
	// nothing in the batch was recorded.
	Ingest(ctx context.Context, events []Usage, now int64) ([]IngestResult, error)
	// Settle applies a node's settlement and moves its export mark from
	// s.From to s.To, in one transaction. A mark at or past s.To is a
	// duplicate: nothing changes. A mark between s.From and s.To is
	// ErrMarkOverlap (the totals cannot be split): nothing changes.
	Settle(ctx context.Context, s Settlement, now int64) (SettleResult, error)
	// ExportMark is node's export mark: the last spool sequence its
	// settlements covered (0 before its first).
	ExportMark(ctx context.Context, node string) (uint64, error)
	// ForgetEvents drops the ids of up to limit events ingested before
	// before, oldest first, and reports how many: an id forgotten is new
	// again to Ingest. Ingest remembers every id until then, so the
	// caller's retention is the window in which a re-sent event is a
	// Duplicate.
	ForgetEvents(ctx context.Context, before int64, limit int) (int, error)
	UsageOf(ctx context.Context, id core.AccountID, limit int) ([]Usage, error)
}

// AdminStore is what the admin API manages besides keys: accounts and
// their budgets and deposits, platform and admin tokens, the audit trail,
// and the paged listings.
type AdminStore interface {
	CreateAccount(ctx context.Context, spec AccountSpec, now int64) (acct Account, created bool, err error)
	Account(ctx context.Context, id core.AccountID) (Account, error)
	Accounts(ctx context.Context) ([]Account, error)
	// Children lists the accounts whose parent is id, in id order; an
	// unknown id is ErrNotFound.
	Children(ctx context.Context, id core.AccountID) ([]core.AccountID, error)
	SetStatus(ctx context.Context, id core.AccountID, s core.Status) (Account, error)
	SetPolicy(ctx context.Context, id core.AccountID, policy []byte) (Account, error)
	// SetBudget sets the schedule. The same budget again is a no-op;
	// otherwise the allowance left expires, the period containing now
	// starts and one allowance of the new budget is deposited.
	SetBudget(ctx context.Context, id core.AccountID, b Budget, now int64) (Account, error)
	// Deposit adds a top-up, idempotent by key: a repeat returns dup=true
	// and changes nothing.
	Deposit(ctx context.Context, id core.AccountID, units core.CostUnits, key string, now int64) (acct Account, dup bool, err error)

	// ListAccounts pages through the accounts f selects, in id order. A
	// Parent that does not exist is ErrNotFound.
	ListAccounts(ctx context.Context, f AccountFilter, p Page) (accts []Account, next string, err error)
	// ListLeases pages through every lease (or only the active ones) in id
	// order.
	ListLeases(ctx context.Context, active bool, p Page) (leases []Lease, next string, err error)
	// ListUsage pages through what UsageOf returns: id's recent accepted
	// usage, newest first. An unknown id is ErrNotFound.
	ListUsage(ctx context.Context, id core.AccountID, p Page) (events []Usage, next string, err error)

	AddPlatformToken(ctx context.Context, t PlatformToken) error
	RevokePlatformToken(ctx context.Context, id string) (PlatformToken, error)
	PlatformTokens(ctx context.Context) ([]PlatformToken, error)
	// AdminTokenDigest returns the bootstrap admin token's digest (revoked
	// or not); ok=false if none has been set. SetAdminTokenDigest stores it,
	// as the admin token BootstrapAdminTokenID, only if none is.
	AdminTokenDigest(ctx context.Context) (d [32]byte, ok bool, err error)
	SetAdminTokenDigest(ctx context.Context, d [32]byte) (stored bool, err error)
	// AddAdminToken, RevokeAdminToken and AdminTokens manage the admin
	// API's tokens with AddKey's idempotency and RevokeKey's; AdminTokens
	// lists them in id order, the bootstrap token included (its Role is
	// RoleAdmin). A Role that is not ValidRole is ErrInvalid.
	AddAdminToken(ctx context.Context, t AdminToken) error
	RevokeAdminToken(ctx context.Context, id string) (AdminToken, error)
	AdminTokens(ctx context.Context) ([]AdminToken, error)
	Audit(ctx context.Context, r AuditRecord) (uint64, error)
	AuditLog(ctx context.Context, after uint64, limit int) ([]AuditRecord, error)
}

// CredentialStore is what authenticates the data plane's callers: API
// keys, and the fingerprint of the server secret they are digested under.
type CredentialStore interface {
	AddKey(ctx context.Context, k Key) error
	RevokeKey(ctx context.Context, account core.AccountID, keyID string) (Key, error)
	Keys(ctx context.Context, account core.AccountID) ([]Key, error) // "" for every account
	// RotateKey adds next (a new key of the same account) and makes the
	// live key oldID of account expire at oldExpiresAt, or at its own
	// earlier expiry, in one transaction. It returns the old key as stored.
	// oldID of another account, or unknown, is ErrNotFound; a revoked
	// oldID is ErrConflict.
	RotateKey(ctx context.Context, account core.AccountID, oldID string, next Key, oldExpiresAt int64) (old Key, err error)
	// ExpireKeys revokes up to limit live keys whose ExpiresAt is not 0
	// and at most now, earliest expiry first, and returns them revoked.
	ExpireKeys(ctx context.Context, now int64, limit int) ([]Key, error)
	// MarkKeysUsed raises each named key's LastUsed to its At (never
	// lowers it), in one transaction. Unknown ids are skipped: a report
	// may arrive for a key the reporter saw before a restart.
	MarkKeysUsed(ctx context.Context, uses []KeyUse) error
	// SecretFingerprint returns the stored fingerprint of the server
	// secret keys are digested under (a keyed hash of it, never the secret
	// itself); ok=false if none has been set. SetSecretFingerprint stores
	// it only if none is: the first wins, as with the admin token digest.
	SecretFingerprint(ctx context.Context) (fp [32]byte, ok bool, err error)
	SetSecretFingerprint(ctx context.Context, fp [32]byte) (stored bool, err error)
}

var (
	ErrNotFound       = errors.New("ledger: not found")
	ErrConflict       = errors.New("ledger: exists with different attributes")
	ErrInvalid        = errors.New("ledger: invalid argument")
	ErrClosedAccount  = errors.New("ledger: account is closed")
	ErrLeaseNotActive = errors.New("ledger: lease is not active")
	ErrFenced         = errors.New("ledger: fencing token does not match the lease")
	ErrNotConserved   = errors.New("ledger: units not conserved")
	ErrPeriodEnded    = errors.New("ledger: the lease's budget period has ended")
	ErrMarkOverlap    = errors.New("ledger: a settlement overlaps what the node's export mark already covers")
	ErrOverflow       = core.ErrCostOverflow
	// ErrCorrupt reports a stored record that does not hold a valid one,
	// or an index that disagrees with the records.
	ErrCorrupt = errors.New("ledger: corrupt record")
)
