package boltstore

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
)

// childKey is parent ⧺ 0 ⧺ child: account ids never contain a zero byte,
// so a parent's children are one contiguous, id-ordered key range.
func childKey(parent, child core.AccountID) []byte {
	k := make([]byte, 0, len(parent)+1+len(child))
	return append(append(append(k, parent...), 0), child...)
}

// Children implements ledger.Store.
func (s *Store) Children(ctx context.Context, id core.AccountID) (out []core.AccountID, err error) {
	err = s.view(ctx, func(x *txn) error {
		if _, err := x.account(id); err != nil {
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

// indexChildren builds the children index of a file written before it.
func indexChildren(tx *bolt.Tx) error {
	children, err := tx.CreateBucket(bucketChildren)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketAccounts).ForEach(func(k, v []byte) error {
		a, err := decodeAccount(k, v)
		if err != nil {
			return err
		}
		if a.Parent == "" {
			return nil
		}
		return children.Put(childKey(a.Parent, a.ID), nil)
	})
}

// checkChildren verifies that the children index names exactly the
// accounts that have a parent, under that parent.
func checkChildren(x *txn, withParent map[string]core.AccountID) error {
	n := 0
	err := x.bucket(bucketChildren).ForEach(func(k, _ []byte) error {
		i := bytes.IndexByte(k, 0)
		if i < 0 || withParent[string(k[i+1:])] != core.AccountID(k[:i]) {
			return fmt.Errorf("%w: children entry %q matches no account's parent", ErrCorrupt, k)
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if n != len(withParent) {
		return fmt.Errorf("%w: children index has %d entries for %d accounts with a parent", ErrCorrupt, n, len(withParent))
	}
	return nil
}
