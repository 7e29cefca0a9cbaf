package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// boltTx is one bbolt transaction's rows (txn.Tx). bbolt has one writer at
// a time, so locking is reading. Writing a record moves the index entries
// that follow from it, derived from its before and after states, so no
// script can forget one:
//
//	due:      an account with a budget period is indexed by PeriodEnd
//	children: an account with a parent, under its parent
//	expiry:   a lease is indexed by ExpiresAt while it is active
//	held:     a lease is indexed by its holder until it is released
//	keyindex, keyexpiry: a key by its account, and by its expiry while live
type boltTx struct {
	tx      *bolt.Tx
	history uint64 // Options.UsageHistory
}

var _ txn.Tx = (*boltTx)(nil)

func (x *boltTx) bucket(name []byte) *bolt.Bucket { return x.tx.Bucket(name) }

// Account implements txn.Tx.
func (x *boltTx) Account(id core.AccountID) (ledger.Account, error) {
	v := x.bucket(bucketAccounts).Get([]byte(id))
	if v == nil {
		return ledger.Account{}, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	return decodeAccount([]byte(id), v)
}

// LockAccounts implements txn.Tx: ids and their ancestors, each once.
func (x *boltTx) LockAccounts(ids []core.AccountID) ([]ledger.Account, error) {
	return txn.WithAncestors(ids, x.Account)
}

// DueAccounts implements txn.Tx: it walks the due index (accounts by
// PeriodEnd) from the earliest, so it reads only accounts whose period
// ended.
func (x *boltTx) DueAccounts(now int64, limit int) ([]ledger.Account, error) {
	var out []ledger.Account
	c := x.bucket(bucketDue).Cursor()
	for k, _ := c.First(); k != nil && len(out) < limit && keyTime(k) <= now; k, _ = c.Next() {
		a, err := x.Account(core.AccountID(k[8:]))
		if err != nil {
			return nil, fmt.Errorf("%w: due index names %s: %w", ErrCorrupt, k[8:], err)
		}
		out = append(out, a)
	}
	return out, nil
}

// InsertAccount implements txn.Tx.
func (x *boltTx) InsertAccount(a *ledger.Account) (bool, error) {
	accounts := x.bucket(bucketAccounts)
	if accounts.Get([]byte(a.ID)) != nil {
		return false, nil
	}
	if err := accounts.Put([]byte(a.ID), encodeAccount(a)); err != nil {
		return false, err
	}
	if err := moveIndex(x.bucket(bucketDue), nil, accountDueKey(a)); err != nil {
		return false, err
	}
	if a.Parent != "" {
		return true, x.bucket(bucketChildren).Put(childKey(a.Parent, a.ID), nil)
	}
	return true, nil
}

// PutAccount implements txn.Tx.
func (x *boltTx) PutAccount(was, now *ledger.Account) error {
	if err := x.bucket(bucketAccounts).Put([]byte(now.ID), encodeAccount(now)); err != nil {
		return err
	}
	return moveIndex(x.bucket(bucketDue), accountDueKey(was), accountDueKey(now))
}

// Deposit implements txn.Tx.
func (x *boltTx) Deposit(id core.AccountID, key string) (core.CostUnits, bool, error) {
	v := x.bucket(bucketDeposits).Get(pairKey(id, key))
	if v == nil {
		return 0, false, nil
	}
	units, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, false, fmt.Errorf("%w: deposit %q of %s", ErrCorrupt, key, id)
	}
	return core.CostUnits(units), true, nil
}

// PutDeposit implements txn.Tx.
func (x *boltTx) PutDeposit(id core.AccountID, key string, units core.CostUnits, _ int64) error {
	return x.bucket(bucketDeposits).Put(pairKey(id, key), binary.AppendUvarint(nil, uint64(units)))
}

// lease reads lease id.
func (x *boltTx) lease(id uint64) (ledger.LeaseRecord, error) {
	v := x.bucket(bucketLeases).Get(u64Key(id))
	if v == nil {
		return ledger.LeaseRecord{}, fmt.Errorf("%w: lease %d", ledger.ErrNotFound, id)
	}
	return decodeLease(id, v)
}

// LockLeases implements txn.Tx.
func (x *boltTx) LockLeases(ids []uint64) ([]ledger.LeaseRecord, error) {
	out := make([]ledger.LeaseRecord, 0, len(ids))
	for _, id := range ids {
		rec, err := x.lease(id)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// DueLeases implements txn.Tx. It walks the expiry index (active leases
// by ExpiresAt, then id) from the oldest up to now, so it reads only
// leases that have expired, and picks those past their ReclaimableAt.
func (x *boltTx) DueLeases(now, grace int64, limit int) ([]ledger.LeaseRecord, error) {
	var expired []ledger.LeaseRecord
	c := x.bucket(bucketExpiry).Cursor()
	for k, _ := c.First(); k != nil && keyTime(k) <= now; k, _ = c.Next() {
		if len(k) != 16 {
			return nil, fmt.Errorf("%w: expiry index key %x", ErrCorrupt, k)
		}
		rec, err := x.lease(seqOf(k[8:]))
		if err != nil {
			return nil, fmt.Errorf("%w: expiry index names lease %d: %w", ErrCorrupt, seqOf(k[8:]), err)
		}
		expired = append(expired, rec)
	}
	return txn.DueFirst(expired, now, grace, limit), nil
}

// NextLeaseID implements txn.Tx: the store-global lease sequence (rolled
// back with the transaction if it fails).
func (x *boltTx) NextLeaseID() (uint64, error) { return x.bucket(bucketLeases).NextSequence() }

// PutLease implements txn.Tx.
func (x *boltTx) PutLease(was, now *ledger.LeaseRecord) error {
	if err := x.bucket(bucketLeases).Put(u64Key(now.ID), encodeLease(now)); err != nil {
		return err
	}
	var expiry, held []byte
	if was != nil {
		expiry, held = leaseExpiryKey(was), leaseHeldKey(was)
	}
	if err := moveIndex(x.bucket(bucketExpiry), expiry, leaseExpiryKey(now)); err != nil {
		return err
	}
	return moveIndex(x.bucket(bucketHeld), held, leaseHeldKey(now))
}

// Incarnation implements txn.Tx.
func (x *boltTx) Incarnation(node string, _ bool) (ledger.Incarnation, bool, error) {
	v := x.bucket(bucketNodes).Get([]byte(node))
	if v == nil {
		return ledger.Incarnation{}, false, nil
	}
	i, err := decodeIncarnation([]byte(node), v)
	return i, err == nil, err
}

// PutIncarnation implements txn.Tx.
func (x *boltTx) PutIncarnation(i *ledger.Incarnation) error {
	return x.bucket(bucketNodes).Put([]byte(i.Node), encodeIncarnation(i))
}

// TakeMark implements txn.Tx.
func (x *boltTx) TakeMark(node string, _ int64) (uint64, error) {
	return seqOf(x.bucket(bucketMarks).Get([]byte(node))), nil
}

// PutMark implements txn.Tx.
func (x *boltTx) PutMark(node string, _, to uint64, _ int64) error {
	return x.bucket(bucketMarks).Put([]byte(node), u64Key(to))
}

// ClaimEvents implements txn.Tx: each new id is recorded with the verdict
// Accepted and indexed by its ingest time.
func (x *boltTx) ClaimEvents(ids [][16]byte, now int64) ([]bool, error) {
	seen, age := x.bucket(bucketEvents), x.bucket(bucketEventAge)
	claimed := make([]bool, len(ids))
	for i, id := range ids {
		if seen.Get(id[:]) != nil {
			continue
		}
		if err := seen.Put(id[:], []byte{byte(ledger.Accepted)}); err != nil {
			return nil, err
		}
		if err := age.Put(eventAgeKey(now, id), nil); err != nil {
			return nil, err
		}
		claimed[i] = true
	}
	return claimed, nil
}

// RejectEvents implements txn.Tx.
func (x *boltTx) RejectEvents(ids [][16]byte) error {
	seen := x.bucket(bucketEvents)
	for _, id := range ids {
		if err := seen.Put(id[:], []byte{byte(ledger.Rejected)}); err != nil {
			return err
		}
	}
	return nil
}

// eventAgeKey orders event ids by when they were ingested.
func eventAgeKey(ingestedAt int64, id [16]byte) []byte {
	return append(timeKey(make([]byte, 0, 8+len(id)), ingestedAt), id[:]...)
}

// ForgetEvents implements txn.Tx: it walks the ingest-time index from its
// oldest entry and drops each id.
func (x *boltTx) ForgetEvents(before int64, limit int) (int, error) {
	n := 0
	seen, age := x.bucket(bucketEvents), x.bucket(bucketEventAge)
	c := age.Cursor()
	for k, _ := c.First(); k != nil && n < limit && keyTime(k) < before; k, _ = c.First() {
		if err := seen.Delete(k[8:]); err != nil {
			return 0, err
		}
		if err := c.Delete(); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// RecordUsage implements txn.Tx: the history goes to the accounts' runs
// (history.go); usage totals are not kept here.
func (x *boltTx) RecordUsage(history []*ledger.Usage, _ []txn.UsageTotal) error {
	var runs usageRuns
	for _, u := range history {
		runs.add(u)
	}
	return x.keepUsage(&runs, x.history)
}

// InsertSecretFingerprint implements txn.Tx.
func (x *boltTx) InsertSecretFingerprint(fp [32]byte) (bool, error) {
	meta := x.bucket(bucketMeta)
	if meta.Get(metaSecret) != nil {
		return false, nil
	}
	return true, meta.Put(metaSecret, fp[:])
}

// AppendAudit implements txn.Tx.
func (x *boltTx) AppendAudit(r *ledger.AuditRecord) (uint64, error) {
	b := x.bucket(bucketAudit)
	seq, err := b.NextSequence()
	if err != nil {
		return 0, err
	}
	return seq, b.Put(u64Key(seq), encodeAudit(r))
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

// heldPrefix is the held index's key range of holder: length-prefixed, not
// separated by a zero byte, since a holder is any string here and one
// holder's entries must never be a prefix range of another's.
func heldPrefix(holder string) []byte {
	k := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(holder)+8), uint64(len(holder)))
	return append(k, holder...)
}

// leaseHeldKey indexes a lease that is not released under its holder.
func leaseHeldKey(rec *ledger.LeaseRecord) []byte {
	if rec.State == ledger.LeaseReleased {
		return nil
	}
	return binary.BigEndian.AppendUint64(heldPrefix(rec.Holder), rec.ID)
}

// childKey is parent ⧺ 0 ⧺ child: account ids never contain a zero byte,
// so a parent's children are one contiguous, id-ordered key range.
func childKey(parent, child core.AccountID) []byte { return pairKey(parent, string(child)) }

// keyTime reads the time a timeKey-prefixed index key starts with.
func keyTime(k []byte) int64 {
	if len(k) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k) ^ 1<<63)
}

// seqOf reads a u64Key (0 if k is not one; sequences start at 1).
func seqOf(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}
