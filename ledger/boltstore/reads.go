package boltstore

// Reads (txn.Queries), each from one read-only transaction.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// all decodes every record of bucket, in key order.
func all[T any](ctx context.Context, b *backend, bucket []byte, decode func(k, v []byte) (T, error)) (out []T, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		return x.bucket(bucket).ForEach(func(k, v []byte) error {
			rec, err := decode(k, v)
			out = append(out, rec)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Account implements ledger.Store.
func (b *backend) Account(ctx context.Context, id core.AccountID) (acct ledger.Account, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		acct, err = x.Account(id)
		return err
	})
	return acct, err
}

// Accounts implements ledger.Store: every account, in id order.
func (b *backend) Accounts(ctx context.Context) ([]ledger.Account, error) {
	return all(ctx, b, bucketAccounts, decodeAccount)
}

// Children implements txn.Queries, through the children index.
func (b *backend) Children(ctx context.Context, id core.AccountID) (out []core.AccountID, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		if _, err := x.Account(id); err != nil {
			return err
		}
		prefix := childKey(id, "")
		c := x.bucket(bucketChildren).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			out = append(out, core.AccountID(k[len(prefix):]))
		}
		return nil
	})
	return out, err
}

// Ancestry implements txn.Queries.
func (b *backend) Ancestry(ctx context.Context, id core.AccountID) (an ledger.Ancestry, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		an, err = txn.ReadAncestry(id, func(id core.AccountID) (*ledger.Account, error) {
			a, err := x.Account(id)
			return &a, err
		})
		return err
	})
	return an, err
}

// Leases implements ledger.Store: every lease, or only the active ones
// (read through the expiry index), in id order: one page of them all.
func (b *backend) Leases(ctx context.Context, active bool) ([]ledger.Lease, error) {
	out, _, err := b.LeasePage(ctx, active, 0, math.MaxInt)
	return out, err
}

// activeLeases reads the ids of the active leases after after from the
// expiry index, in id order.
func activeLeases(x *boltTx, after uint64) ([]uint64, error) {
	var ids []uint64
	err := x.bucket(bucketExpiry).ForEach(func(k, _ []byte) error {
		if id := seqOf(k[8:]); id > after {
			ids = append(ids, id)
		}
		return nil
	})
	slices.Sort(ids)
	return ids, err
}

// LeasesOf implements txn.Queries: it reads holder's range of the held
// index, so its cost follows what the holder answers for, not the store's
// size, and in id order (heldPrefix: the range is one holder's, by id).
func (b *backend) LeasesOf(ctx context.Context, holder string) (out []ledger.Lease, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		prefix := heldPrefix(holder)
		c := x.bucket(bucketHeld).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: held index key %x", ErrCorrupt, k)
			}
			rec, err := x.lease(binary.BigEndian.Uint64(k[len(prefix):]))
			if err != nil {
				return fmt.Errorf("%w: held index names a lease it cannot read: %w", ErrCorrupt, err)
			}
			out = append(out, rec.Lease)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ExportMark implements txn.Queries.
func (b *backend) ExportMark(ctx context.Context, node string) (mark uint64, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		mark = seqOf(x.bucket(bucketMarks).Get([]byte(node)))
		return nil
	})
	return mark, err
}

// Incarnations implements ledger.Store.
func (b *backend) Incarnations(ctx context.Context) ([]ledger.Incarnation, error) {
	return all(ctx, b, bucketNodes, decodeIncarnation)
}

// Keys implements ledger.Store: account's keys (every key for ""), in id
// order. One account's keys are read through the account index.
func (b *backend) Keys(ctx context.Context, account core.AccountID) (out []ledger.Key, err error) {
	if account == "" {
		return all(ctx, b, bucketKeys, decodeKey)
	}
	err = b.view(ctx, func(x *boltTx) error {
		var ids [][]byte
		prefix := pairKey(account, "")
		c := x.bucket(bucketKeyIndex).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			ids = append(ids, k[len(prefix):])
		}
		out, err = x.indexedKeys("key index", ids)
		return err
	})
	return out, err
}

// PlatformTokens implements ledger.Store: every token, in id order.
func (b *backend) PlatformTokens(ctx context.Context) ([]ledger.PlatformToken, error) {
	return all(ctx, b, bucketTokens, decodePlatformToken)
}

// AdminTokens implements ledger.Store: every admin token, in id order.
func (b *backend) AdminTokens(ctx context.Context) ([]ledger.AdminToken, error) {
	return all(ctx, b, bucketAdmins, decodeAdminToken)
}

// StoredFingerprint implements txn.Queries.
func (b *backend) StoredFingerprint(ctx context.Context) (v []byte, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		v = bytes.Clone(x.bucket(bucketMeta).Get(metaSecret)) // bbolt's memory is only valid in the transaction
		return nil
	})
	return v, err
}

// AuditAfter implements txn.Queries: up to limit records with Seq > after,
// ascending.
func (b *backend) AuditAfter(ctx context.Context, after uint64, limit int) (out []ledger.AuditRecord, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		c := x.bucket(bucketAudit).Cursor()
		for k, v := c.Seek(u64Key(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			r, err := decodeAudit(seqOf(k), v)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
