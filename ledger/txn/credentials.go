package txn

import (
	"context"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// addRecord stores rec in t, or does nothing if the identical record is
// stored (another one under its id is ErrConflict).
func addRecord[T comparable](t Table[T], rec *T, what, id string) error {
	stored, inserted, err := t.Insert(rec)
	if err != nil || inserted {
		return err
	}
	if stored != *rec {
		return fmt.Errorf("%w: %s %s", ledger.ErrConflict, what, id)
	}
	return nil
}

// revokeRecord revokes record id of t (revoked names its flag); revoking
// twice returns the revoked record and changes nothing.
func revokeRecord[T any](t Table[T], id string, revoked func(*T) *bool) (T, error) {
	rec, err := t.Lock(id)
	if err != nil || *revoked(&rec) {
		return rec, err
	}
	was := rec
	*revoked(&rec) = true
	return rec, t.Put(&was, &rec)
}

// AddKey implements ledger.Store. The account must exist. Adding a key
// whose id exists is a no-op if the record is identical, else ErrConflict.
func (s *Store) AddKey(ctx context.Context, k ledger.Key) error {
	if err := s.validKey(&k); err != nil {
		return err
	}
	return s.update(ctx, func(w *work) error {
		if _, err := w.tx.Account(k.Account); err != nil {
			return err
		}
		return addRecord(w.tx.Keys(), &k, "key", k.ID)
	})
}

// validKey checks what can be checked about k without the store.
func (s *Store) validKey(k *ledger.Key) error {
	if err := s.name("key", k.ID); err != nil {
		return err
	}
	if err := k.Account.Validate(); err != nil {
		return fmt.Errorf("%w: key %s: %w", ledger.ErrInvalid, k.ID, err)
	}
	return s.label("key name", k.Name)
}

// lockKey locks key id of account; a key of another account is
// ErrNotFound (the caller learns nothing about it).
func lockKey(tx Tx, account core.AccountID, id string) (ledger.Key, error) {
	k, err := tx.Keys().Lock(id)
	if err == nil && k.Account != account {
		return ledger.Key{}, fmt.Errorf("%w: key %q of %s", ledger.ErrNotFound, id, account)
	}
	return k, err
}

// RevokeKey implements ledger.Store. A key of another account is
// ErrNotFound; revoking twice returns the revoked key and changes nothing.
func (s *Store) RevokeKey(ctx context.Context, account core.AccountID, keyID string) (k ledger.Key, err error) {
	err = s.update(ctx, func(w *work) error {
		if _, err := lockKey(w.tx, account, keyID); err != nil {
			return err
		}
		k, err = revokeRecord(w.tx.Keys(), keyID, func(k *ledger.Key) *bool { return &k.Revoked })
		return err
	})
	if err != nil {
		return ledger.Key{}, err
	}
	return k, nil
}

// RotateKey implements ledger.Store: the new key is added and the old
// one's expiry moved (never later than it was) in one transaction.
func (s *Store) RotateKey(ctx context.Context, account core.AccountID, oldID string, next ledger.Key, oldExpiresAt int64) (old ledger.Key, err error) {
	if err := s.validKey(&next); err != nil {
		return ledger.Key{}, err
	}
	if next.Account != account || next.ID == oldID || next.Revoked || oldExpiresAt == 0 {
		return ledger.Key{}, fmt.Errorf("%w: rotating %s of %s into %+v until %d", ledger.ErrInvalid, oldID, account, next, oldExpiresAt)
	}
	err = s.update(ctx, func(w *work) error {
		if old, err = lockKey(w.tx, account, oldID); err != nil {
			return err
		}
		if old.Revoked {
			return fmt.Errorf("%w: key %s of %s is revoked", ledger.ErrConflict, oldID, account)
		}
		if old.ExpiresAt == 0 || oldExpiresAt < old.ExpiresAt {
			was := old
			old.ExpiresAt = oldExpiresAt
			if err := w.tx.Keys().Put(&was, &old); err != nil {
				return err
			}
		}
		return addRecord(w.tx.Keys(), &next, "key", next.ID)
	})
	if err != nil {
		return ledger.Key{}, err
	}
	return old, nil
}

// ExpireKeys implements ledger.Store: the keys it revoked, earliest expiry
// first.
func (s *Store) ExpireKeys(ctx context.Context, now int64, limit int) (out []ledger.Key, err error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: key expiry limit %d", ledger.ErrInvalid, limit)
	}
	if idle, err := s.idle(ctx, DueKeys, now); idle {
		return nil, err
	}
	err = s.update(ctx, func(w *work) error {
		out = nil
		due, err := w.tx.DueKeys(now, limit)
		if err != nil {
			return err
		}
		for _, k := range due {
			was := k
			k.Revoked = true
			if err := w.tx.Keys().Put(&was, &k); err != nil {
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

// MarkKeysUsed implements ledger.Store.
func (s *Store) MarkKeysUsed(ctx context.Context, uses []ledger.KeyUse) error {
	if len(uses) == 0 {
		return nil
	}
	return s.update(ctx, func(w *work) error { return w.tx.MarkKeysUsed(uses) })
}

// AddPlatformToken implements ledger.Store, with AddKey's idempotency.
func (s *Store) AddPlatformToken(ctx context.Context, t ledger.PlatformToken) error {
	if err := s.name("platform token", t.ID); err != nil {
		return err
	}
	return s.update(ctx, func(w *work) error {
		return addRecord(w.tx.PlatformTokens(), &t, "platform token", t.ID)
	})
}

// RevokePlatformToken implements ledger.Store; revoking twice is a no-op.
func (s *Store) RevokePlatformToken(ctx context.Context, id string) (t ledger.PlatformToken, err error) {
	err = s.update(ctx, func(w *work) error {
		t, err = revokeRecord(w.tx.PlatformTokens(), id, func(t *ledger.PlatformToken) *bool { return &t.Revoked })
		return err
	})
	if err != nil {
		return ledger.PlatformToken{}, err
	}
	return t, nil
}

// AdminTokenDigest implements ledger.Store: the bootstrap admin token's
// digest, revoked or not.
func (s *Store) AdminTokenDigest(ctx context.Context) (d [32]byte, ok bool, err error) {
	tokens, err := s.b.AdminTokens(ctx)
	if err != nil {
		return d, false, err
	}
	for _, t := range tokens {
		if t.ID == ledger.BootstrapAdminTokenID {
			return t.Digest, true, nil
		}
	}
	return d, false, nil
}

// SetAdminTokenDigest implements ledger.Store: the first digest wins, so
// nodes bootstrapping at once agree on one admin token, and a revoked
// bootstrap token is never replaced.
func (s *Store) SetAdminTokenDigest(ctx context.Context, d [32]byte) (stored bool, err error) {
	t := ledger.AdminToken{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: d, Role: ledger.RoleAdmin}
	err = s.update(ctx, func(w *work) error {
		_, stored, err = w.tx.AdminTokens().Insert(&t)
		return err
	})
	return stored && err == nil, err
}

// AddAdminToken implements ledger.Store, with AddKey's idempotency. The
// bootstrap id is SetAdminTokenDigest's alone, and a role that is not one
// of ledger.AdminRoles is ErrInvalid.
func (s *Store) AddAdminToken(ctx context.Context, t ledger.AdminToken) error {
	if err := s.name("admin token", t.ID); err != nil {
		return err
	}
	if t.ID == ledger.BootstrapAdminTokenID {
		return fmt.Errorf("%w: admin token id %q is the bootstrap token's", ledger.ErrInvalid, t.ID)
	}
	if err := s.label("admin token name", t.Name); err != nil {
		return err
	}
	if !ledger.ValidRole(t.Role) {
		return fmt.Errorf("%w: admin token %q has no role %q", ledger.ErrInvalid, t.ID, t.Role)
	}
	return s.update(ctx, func(w *work) error {
		return addRecord(w.tx.AdminTokens(), &t, "admin token", t.ID)
	})
}

// RevokeAdminToken implements ledger.Store; revoking twice is a no-op.
func (s *Store) RevokeAdminToken(ctx context.Context, id string) (t ledger.AdminToken, err error) {
	err = s.update(ctx, func(w *work) error {
		t, err = revokeRecord(w.tx.AdminTokens(), id, func(t *ledger.AdminToken) *bool { return &t.Revoked })
		return err
	})
	if err != nil {
		return ledger.AdminToken{}, err
	}
	return t, nil
}

// SecretFingerprint implements ledger.Store: a stored fingerprint that is
// not 32 bytes is ErrCorrupt.
func (s *Store) SecretFingerprint(ctx context.Context) (fp [32]byte, ok bool, err error) {
	v, err := s.b.StoredFingerprint(ctx)
	switch {
	case err != nil || v == nil:
		return fp, false, err
	case len(v) != len(fp):
		return fp, false, fmt.Errorf("%w: secret fingerprint of %d bytes", ledger.ErrCorrupt, len(v))
	}
	return [32]byte(v), true, nil
}

// SetSecretFingerprint implements ledger.Store: the first fingerprint
// wins, so every node sharing the ledger is held to the secret the first
// one started with.
func (s *Store) SetSecretFingerprint(ctx context.Context, fp [32]byte) (stored bool, err error) {
	err = s.update(ctx, func(w *work) error {
		stored, err = w.tx.InsertSecretFingerprint(fp)
		return err
	})
	return stored && err == nil, err
}

// Audit implements ledger.Store: r is stored under the next sequence
// number (from 1, without gaps), which is returned; r.Seq is ignored.
func (s *Store) Audit(ctx context.Context, r ledger.AuditRecord) (seq uint64, err error) {
	for _, f := range [...]struct{ what, v string }{{"audit actor", r.Actor}, {"audit action", r.Action}, {"audit target", r.Target}} {
		if err := s.text(f.what, f.v, 0); err != nil {
			return 0, err
		}
	}
	err = s.update(ctx, func(w *work) error {
		seq, err = w.tx.AppendAudit(&r)
		return err
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}
