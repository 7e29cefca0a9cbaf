package boltstore

import (
	"bytes"
	"context"
	"strconv"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// Paged listings. A cursor is the last item's key as text: an account id,
// or a lease id or usage sequence in decimal (ledger.SeqCursor); a page
// reads at most ledger.MaxPageScan items.

// AccountPage implements txn.Queries. With a Parent it walks that
// account's children index; otherwise the accounts themselves.
func (b *backend) AccountPage(ctx context.Context, f ledger.AccountFilter, after string, limit int) (out []ledger.Account, next string, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		// Each index key ends in an account id after prefix.
		var prefix []byte
		index := x.bucket(bucketAccounts)
		if f.Parent != "" {
			if _, err := x.Account(f.Parent); err != nil {
				return err
			}
			prefix, index = childKey(f.Parent, ""), x.bucket(bucketChildren)
		}
		c := index.Cursor()
		k, _ := c.Seek(append(bytes.Clone(prefix), after...))
		if after != "" && k != nil && string(k[min(len(prefix), len(k)):]) == after {
			k, _ = c.Next()
		}
		for scanned := 0; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(out) == limit || scanned == ledger.MaxPageScan {
				return nil
			}
			scanned++
			id := core.AccountID(k[len(prefix):])
			next = string(id)
			a, err := x.Account(id)
			if err != nil {
				return err
			}
			if !f.ByStatus || a.Status == f.Status {
				out = append(out, a)
			}
		}
		next = "" // the index ended: nothing follows
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// LeasePage implements txn.Queries. Active leases are read through the
// expiry index (they are few: about one per busy account), every lease
// through the leases themselves.
func (b *backend) LeasePage(ctx context.Context, active bool, after uint64, limit int) (out []ledger.Lease, next string, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		if active {
			ids, err := activeLeases(x, after)
			if err != nil {
				return err
			}
			ids, next = txn.CutPage(ids, limit, func(id uint64) string { return strconv.FormatUint(id, 10) })
			for _, id := range ids {
				rec, err := x.lease(id)
				if err != nil {
					return err
				}
				out = append(out, rec.Lease)
			}
			return nil
		}
		c := x.bucket(bucketLeases).Cursor()
		for k, v := c.Seek(u64Key(after + 1)); k != nil && len(out) <= limit; k, v = c.Next() {
			rec, err := decodeLease(seqOf(k), v)
			if err != nil {
				return err
			}
			out = append(out, rec.Lease)
		}
		out, next = txn.CutPage(out, limit, func(l ledger.Lease) string { return strconv.FormatUint(l.ID, 10) })
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// UsagePage implements txn.Queries: newest first, so the cursor is the
// sequence of the last (oldest) event returned.
func (b *backend) UsagePage(ctx context.Context, id core.AccountID, before uint64, limit int) (out []ledger.Usage, next string, err error) {
	err = b.view(ctx, func(x *boltTx) error {
		if _, err := x.Account(id); err != nil {
			return err
		}
		u := x.bucket(bucketUsage).Bucket([]byte(id))
		if u == nil {
			return nil
		}
		var last uint64
		return eachUsageBack(u, b.history, before, func(seq uint64, u ledger.Usage) bool {
			if len(out) == limit {
				next = strconv.FormatUint(last, 10)
				return false
			}
			out, last = append(out, u), seq
			return true
		})
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}
