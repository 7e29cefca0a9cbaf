package boltstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

func validName(what, id string) error {
	if id == "" || len(id) > maxNameLen {
		return fmt.Errorf("%w: %s id must be 1-%d bytes", ledger.ErrInvalid, what, maxNameLen)
	}
	return nil
}

// AddKey implements ledger.Store. The account must exist. Adding a key
// whose id exists is a no-op if the record is identical, else ErrConflict.
func (s *Store) AddKey(ctx context.Context, k ledger.Key) error {
	if err := validKey(&k); err != nil {
		return err
	}
	return s.update(ctx, func(x *txn) error { return x.addKey(&k) })
}

func validKey(k *ledger.Key) error {
	if err := validName("key", k.ID); err != nil {
		return err
	}
	if err := k.Account.Validate(); err != nil {
		return fmt.Errorf("%w: key %s: %w", ledger.ErrInvalid, k.ID, err)
	}
	if len(k.Name) > maxNameLen {
		return fmt.Errorf("%w: key %s: name of %d bytes", ledger.ErrInvalid, k.ID, len(k.Name))
	}
	return nil
}

// addKey stores k with its index entries, or does nothing if the identical
// record is stored.
func (x *txn) addKey(k *ledger.Key) error {
	if _, err := x.account(k.Account); err != nil {
		return err
	}
	keys := x.bucket(bucketKeys)
	if v := keys.Get([]byte(k.ID)); v != nil {
		old, err := decodeKey([]byte(k.ID), v)
		if err != nil {
			return err
		}
		if old != *k {
			return fmt.Errorf("%w: key %s", ledger.ErrConflict, k.ID)
		}
		return nil
	}
	if err := x.putKey(nil, k); err != nil {
		return err
	}
	return x.bucket(bucketKeyIndex).Put(pairKey(k.Account, k.ID), nil)
}

// putKey writes k, moving its expiry index entry from where old (nil for
// a new key) had it.
func (x *txn) putKey(old, k *ledger.Key) error {
	if err := x.bucket(bucketKeys).Put([]byte(k.ID), encodeKey(k)); err != nil {
		return err
	}
	var from []byte
	if old != nil {
		from = keyExpiryKey(old)
	}
	return moveIndex(x.bucket(bucketKeyExp), from, keyExpiryKey(k))
}

// keyExpiryKey indexes a live key with an expiry by when it expires.
func keyExpiryKey(k *ledger.Key) []byte {
	if k.Revoked || k.ExpiresAt == 0 {
		return nil
	}
	return append(timeKey(make([]byte, 0, 8+len(k.ID)), k.ExpiresAt), k.ID...)
}

// loadKey reads key id; a key of another account is ErrNotFound.
func (x *txn) loadKey(account core.AccountID, id string) (ledger.Key, error) {
	v := x.bucket(bucketKeys).Get([]byte(id))
	if v == nil {
		return ledger.Key{}, fmt.Errorf("%w: key %q", ledger.ErrNotFound, id)
	}
	k, err := decodeKey([]byte(id), v)
	if err != nil {
		return ledger.Key{}, err
	}
	if k.Account != account {
		return ledger.Key{}, fmt.Errorf("%w: key %q of %s", ledger.ErrNotFound, id, account)
	}
	return k, nil
}

// RevokeKey implements ledger.Store. A key of another account is
// ErrNotFound (the caller learns nothing about it); revoking twice returns
// the revoked key and changes nothing.
func (s *Store) RevokeKey(ctx context.Context, account core.AccountID, keyID string) (k ledger.Key, err error) {
	err = s.update(ctx, func(x *txn) error {
		if k, err = x.loadKey(account, keyID); err != nil || k.Revoked {
			return err
		}
		old := k
		k.Revoked = true
		return x.putKey(&old, &k)
	})
	if err != nil {
		return ledger.Key{}, err
	}
	return k, nil
}

// Keys implements ledger.Store: account's keys (every key for ""), in id
// order. One account's keys are read through the account index.
func (s *Store) Keys(ctx context.Context, account core.AccountID) (out []ledger.Key, err error) {
	err = s.view(ctx, func(x *txn) error {
		keys := x.bucket(bucketKeys)
		if account == "" {
			return keys.ForEach(func(id, v []byte) error {
				k, err := decodeKey(id, v)
				out = append(out, k)
				return err
			})
		}
		prefix := pairKey(account, "")
		c := x.bucket(bucketKeyIndex).Cursor()
		for ik, _ := c.Seek(prefix); ik != nil && bytes.HasPrefix(ik, prefix); ik, _ = c.Next() {
			id := ik[len(prefix):]
			v := keys.Get(id)
			if v == nil {
				return fmt.Errorf("%w: key index names missing key %q", ErrCorrupt, id)
			}
			k, err := decodeKey(id, v)
			if err != nil {
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

// AddPlatformToken implements ledger.Store, with AddKey's idempotency.
func (s *Store) AddPlatformToken(ctx context.Context, t ledger.PlatformToken) error {
	if err := validName("platform token", t.ID); err != nil {
		return err
	}
	return s.update(ctx, func(x *txn) error {
		tokens := x.bucket(bucketTokens)
		if v := tokens.Get([]byte(t.ID)); v != nil {
			old, err := decodePlatformToken([]byte(t.ID), v)
			if err != nil {
				return err
			}
			if old != t {
				return fmt.Errorf("%w: platform token %s", ledger.ErrConflict, t.ID)
			}
			return nil
		}
		return tokens.Put([]byte(t.ID), encodePlatformToken(&t))
	})
}

// RevokePlatformToken implements ledger.Store; revoking twice is a no-op.
func (s *Store) RevokePlatformToken(ctx context.Context, id string) (t ledger.PlatformToken, err error) {
	err = s.update(ctx, func(x *txn) error {
		tokens := x.bucket(bucketTokens)
		v := tokens.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("%w: platform token %q", ledger.ErrNotFound, id)
		}
		if t, err = decodePlatformToken([]byte(id), v); err != nil || t.Revoked {
			return err
		}
		t.Revoked = true
		return tokens.Put([]byte(id), encodePlatformToken(&t))
	})
	if err != nil {
		return ledger.PlatformToken{}, err
	}
	return t, nil
}

// PlatformTokens implements ledger.Store: every token, in id order.
func (s *Store) PlatformTokens(ctx context.Context) (out []ledger.PlatformToken, err error) {
	err = s.view(ctx, func(x *txn) error {
		return x.bucket(bucketTokens).ForEach(func(id, v []byte) error {
			t, err := decodePlatformToken(id, v)
			out = append(out, t)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SecretFingerprint implements ledger.Store.
func (s *Store) SecretFingerprint(ctx context.Context) (fp [32]byte, ok bool, err error) {
	err = s.view(ctx, func(x *txn) error {
		v := x.bucket(bucketMeta).Get(metaSecret)
		if v == nil {
			return nil
		}
		if len(v) != len(fp) {
			return fmt.Errorf("%w: secret fingerprint of %d bytes", ErrCorrupt, len(v))
		}
		copy(fp[:], v)
		ok = true
		return nil
	})
	return fp, ok, err
}

// SetSecretFingerprint implements ledger.Store: the first fingerprint
// wins, as with the admin token digest.
func (s *Store) SetSecretFingerprint(ctx context.Context, fp [32]byte) (stored bool, err error) {
	err = s.update(ctx, func(x *txn) error {
		meta := x.bucket(bucketMeta)
		if meta.Get(metaSecret) != nil {
			return nil
		}
		stored = true
		return meta.Put(metaSecret, fp[:])
	})
	return stored && err == nil, err
}

// Audit implements ledger.Store: r is stored under the next sequence
// number (from 1), which is returned; r.Seq is ignored.
func (s *Store) Audit(ctx context.Context, r ledger.AuditRecord) (seq uint64, err error) {
	err = s.update(ctx, func(x *txn) error {
		b := x.bucket(bucketAudit)
		if seq, err = b.NextSequence(); err != nil {
			return err
		}
		return b.Put(u64Key(seq), encodeAudit(&r))
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// AuditLog implements ledger.Store: up to limit records with Seq > after,
// ascending.
func (s *Store) AuditLog(ctx context.Context, after uint64, limit int) (out []ledger.AuditRecord, err error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: audit limit %d", ledger.ErrInvalid, limit)
	}
	if after == ^uint64(0) {
		return nil, nil
	}
	err = s.view(ctx, func(x *txn) error {
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
