package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// RotateKey implements ledger.Store: the new key is added and the old
// one's expiry moved (never later than it was) in one transaction.
func (s *Store) RotateKey(ctx context.Context, account core.AccountID, oldID string, next ledger.Key, oldExpiresAt int64) (old ledger.Key, err error) {
	if err := validKey(&next); err != nil {
		return ledger.Key{}, err
	}
	if next.Account != account || next.ID == oldID || next.Revoked || oldExpiresAt == 0 {
		return ledger.Key{}, fmt.Errorf("%w: rotating %s of %s into %+v until %d", ledger.ErrInvalid, oldID, account, next, oldExpiresAt)
	}
	err = s.update(ctx, func(x *txn) error {
		if old, err = x.loadKey(account, oldID); err != nil {
			return err
		}
		if old.Revoked {
			return fmt.Errorf("%w: key %s of %s is revoked", ledger.ErrConflict, oldID, account)
		}
		before := old
		if old.ExpiresAt == 0 || oldExpiresAt < old.ExpiresAt {
			old.ExpiresAt = oldExpiresAt
		}
		if err := x.putKey(&before, &old); err != nil {
			return err
		}
		return x.addKey(&next)
	})
	if err != nil {
		return ledger.Key{}, err
	}
	return old, nil
}

// ExpireKeys implements ledger.Store. It walks the expiry index from its
// earliest entry, so its cost follows what is due; with nothing due it
// writes nothing (it looks in a read transaction first).
func (s *Store) ExpireKeys(ctx context.Context, now int64, limit int) (out []ledger.Key, err error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: key expiry limit %d", ledger.ErrInvalid, limit)
	}
	if due, err := s.due(ctx, bucketKeyExp, now); !due || err != nil {
		return nil, err
	}
	err = s.update(ctx, func(x *txn) error {
		out = out[:0]
		var due [][]byte
		c := x.bucket(bucketKeyExp).Cursor()
		for k, _ := c.First(); k != nil && len(due) < limit && keyTime(k) <= now; k, _ = c.Next() {
			due = append(due, bytes.Clone(k[8:])) // bbolt's memory moves as the index changes
		}
		keys := x.bucket(bucketKeys)
		for _, id := range due {
			v := keys.Get(id)
			if v == nil {
				return fmt.Errorf("%w: key expiry index names missing key %q", ErrCorrupt, id)
			}
			k, err := decodeKey(id, v)
			if err != nil {
				return err
			}
			before := k
			k.Revoked = true
			if err := x.putKey(&before, &k); err != nil {
				return err
			}
			out = append(out, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MarkKeysUsed implements ledger.Store. Keys whose LastUsed is already at
// or past the report are not rewritten.
func (s *Store) MarkKeysUsed(ctx context.Context, uses []ledger.KeyUse) error {
	if len(uses) == 0 {
		return nil
	}
	return s.update(ctx, func(x *txn) error {
		keys := x.bucket(bucketKeys)
		for _, u := range uses {
			v := keys.Get([]byte(u.ID))
			if v == nil {
				continue
			}
			k, err := decodeKey([]byte(u.ID), v)
			if err != nil {
				return err
			}
			if u.At <= k.LastUsed {
				continue
			}
			before := k
			k.LastUsed = u.At
			if err := x.putKey(&before, &k); err != nil {
				return err
			}
		}
		return nil
	})
}
