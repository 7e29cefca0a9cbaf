package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// txn is one bbolt transaction with a cache of the accounts and leases it
// has decoded. Rules mutate the cached values in place (through pointers),
// so every rule in one call sees the others' effects — a consolidation's
// acquire sees its release's credit, the 256 events of an ingest batch see
// each other — and flush writes each changed record once, at the end,
// together with the index entries that follow from it:
//
//	due:    an account with a budget period is indexed by PeriodEnd
//	expiry: a lease is indexed by ExpiresAt while it is active
//	held:   a lease is indexed by its holder until it is released
//
// Keeping index maintenance here, derived from the records' before and
// after states, means no call can forget to update an index.
type txn struct {
	tx       *bolt.Tx
	accounts map[core.AccountID]*cachedAccount
	leases   map[uint64]*cachedLease
}

type cachedAccount struct {
	a   ledger.Account
	raw []byte // encoding as loaded; nil for an account created in this txn
	due []byte // due index key as loaded; nil if none
}

type cachedLease struct {
	rec    ledger.LeaseRecord
	raw    []byte
	expiry []byte // expiry index key as loaded; nil if not active
	held   []byte // held index key as loaded; nil if released
}

func newTxn(tx *bolt.Tx) *txn {
	return &txn{tx: tx, accounts: make(map[core.AccountID]*cachedAccount), leases: make(map[uint64]*cachedLease)}
}

func (x *txn) bucket(name []byte) *bolt.Bucket { return x.tx.Bucket(name) }

// account returns the cached account id, loading it on first use.
func (x *txn) account(id core.AccountID) (*ledger.Account, error) {
	if c, ok := x.accounts[id]; ok {
		return &c.a, nil
	}
	v := x.bucket(bucketAccounts).Get([]byte(id))
	if v == nil {
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	a, err := decodeAccount([]byte(id), v)
	if err != nil {
		return nil, err
	}
	c := &cachedAccount{a: a, raw: bytes.Clone(v), due: accountDueKey(&a)}
	x.accounts[id] = c
	return &c.a, nil
}

// ancestry returns id and its ancestors, leaf first.
func (x *txn) ancestry(id core.AccountID) (ledger.Ancestry, error) {
	var an ledger.Ancestry
	for next := id; next != ""; {
		if len(an) == 3 { // org → workspace → agent is as deep as it gets
			return nil, fmt.Errorf("%w: ancestry of %s is deeper than three", ErrCorrupt, id)
		}
		a, err := x.account(next)
		if err != nil {
			return nil, err
		}
		an = append(an, a)
		next = a.Parent
	}
	return an, nil
}

// insertAccount caches a new account; flush writes it.
func (x *txn) insertAccount(a ledger.Account) *ledger.Account {
	c := &cachedAccount{a: a}
	x.accounts[a.ID] = c
	return &c.a
}

// lease returns the cached lease id, loading it on first use.
func (x *txn) lease(id uint64) (*ledger.LeaseRecord, error) {
	if c, ok := x.leases[id]; ok {
		return &c.rec, nil
	}
	v := x.bucket(bucketLeases).Get(u64Key(id))
	if v == nil {
		return nil, fmt.Errorf("%w: lease %d", ledger.ErrNotFound, id)
	}
	rec, err := decodeLease(id, v)
	if err != nil {
		return nil, err
	}
	c := &cachedLease{rec: rec, raw: bytes.Clone(v), expiry: leaseExpiryKey(&rec), held: leaseHeldKey(&rec)}
	x.leases[id] = c
	return &c.rec, nil
}

// insertLease caches a new lease; flush writes it.
func (x *txn) insertLease(rec ledger.LeaseRecord) {
	x.leases[rec.ID] = &cachedLease{rec: rec}
}

// nextLeaseID draws the store-global lease sequence (rolled back with the
// transaction if it fails).
func (x *txn) nextLeaseID() (uint64, error) { return x.bucket(bucketLeases).NextSequence() }

// funders returns the accounts that funded rec, in rec.Funding order.
func (x *txn) funders(rec *ledger.LeaseRecord) ([]*ledger.Account, error) {
	out := make([]*ledger.Account, len(rec.Funding))
	for i, f := range rec.Funding {
		a, err := x.account(f.Account)
		if err != nil {
			return nil, fmt.Errorf("%w: funder of lease %d: %w", ErrCorrupt, rec.ID, err)
		}
		out[i] = a
	}
	return out, nil
}

// flush writes every cached record that changed and moves its index
// entries. Unchanged records are not rewritten.
func (x *txn) flush() error {
	accounts, due := x.bucket(bucketAccounts), x.bucket(bucketDue)
	for id, c := range x.accounts {
		v := encodeAccount(&c.a)
		if c.raw != nil && bytes.Equal(v, c.raw) {
			continue
		}
		if err := accounts.Put([]byte(id), v); err != nil {
			return err
		}
		if err := moveIndex(due, c.due, accountDueKey(&c.a)); err != nil {
			return err
		}
	}
	leases, expiry, held := x.bucket(bucketLeases), x.bucket(bucketExpiry), x.bucket(bucketHeld)
	for id, c := range x.leases {
		v := encodeLease(&c.rec)
		if c.raw != nil && bytes.Equal(v, c.raw) {
			continue
		}
		if err := leases.Put(u64Key(id), v); err != nil {
			return err
		}
		if err := moveIndex(expiry, c.expiry, leaseExpiryKey(&c.rec)); err != nil {
			return err
		}
		if err := moveIndex(held, c.held, leaseHeldKey(&c.rec)); err != nil {
			return err
		}
	}
	return nil
}

// moveIndex replaces index entry from with to (either may be nil).
func moveIndex(b *bolt.Bucket, from, to []byte) error {
	if bytes.Equal(from, to) {
		return nil
	}
	if from != nil {
		if err := b.Delete(from); err != nil {
			return err
		}
	}
	if to != nil {
		return b.Put(to, nil)
	}
	return nil
}

func accountDueKey(a *ledger.Account) []byte {
	if a.Budget.Period == ledger.PeriodNone {
		return nil
	}
	return dueKey(a.PeriodEnd, a.ID)
}

func leaseExpiryKey(rec *ledger.LeaseRecord) []byte {
	if rec.State != ledger.LeaseActive {
		return nil
	}
	return expiryKey(rec.ExpiresAt, rec.ID)
}

// keyTime reads the time a timeKey-prefixed index key starts with.
func keyTime(k []byte) int64 {
	if len(k) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k) ^ 1<<63)
}
