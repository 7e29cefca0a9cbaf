package boltstore

import (
	"context"
	"fmt"

	"github.com/tollgated/tollgated/ledger"
)

// AdminTokenDigest implements ledger.Store: the bootstrap admin token's
// digest, revoked or not.
func (s *Store) AdminTokenDigest(ctx context.Context) (d [32]byte, ok bool, err error) {
	err = s.view(ctx, func(x *txn) error {
		v := x.bucket(bucketAdmins).Get([]byte(ledger.BootstrapAdminTokenID))
		if v == nil {
			return nil
		}
		t, err := decodeAdminToken([]byte(ledger.BootstrapAdminTokenID), v)
		d, ok = t.Digest, err == nil
		return err
	})
	return d, ok, err
}

// SetAdminTokenDigest implements ledger.Store: the first digest wins, so
// two daemons bootstrapping at once agree on one admin token, and a
// revoked bootstrap token is never replaced.
func (s *Store) SetAdminTokenDigest(ctx context.Context, d [32]byte) (stored bool, err error) {
	err = s.update(ctx, func(x *txn) error {
		admins := x.bucket(bucketAdmins)
		id := []byte(ledger.BootstrapAdminTokenID)
		if admins.Get(id) != nil {
			return nil
		}
		stored = true
		t := ledger.AdminToken{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: d, Role: ledger.RoleAdmin}
		return admins.Put(id, encodeAdminToken(&t))
	})
	return stored && err == nil, err
}

// AddAdminToken implements ledger.Store, with AddKey's idempotency. The
// bootstrap id is SetAdminTokenDigest's alone.
func (s *Store) AddAdminToken(ctx context.Context, t ledger.AdminToken) error {
	if err := validName("admin token", t.ID); err != nil {
		return err
	}
	if t.ID == ledger.BootstrapAdminTokenID || len(t.Name) > maxNameLen || !ledger.ValidRole(t.Role) {
		return fmt.Errorf("%w: admin token %q named %q with role %q", ledger.ErrInvalid, t.ID, t.Name, t.Role)
	}
	return s.update(ctx, func(x *txn) error {
		admins := x.bucket(bucketAdmins)
		if v := admins.Get([]byte(t.ID)); v != nil {
			old, err := decodeAdminToken([]byte(t.ID), v)
			if err != nil {
				return err
			}
			if old != t {
				return fmt.Errorf("%w: admin token %s", ledger.ErrConflict, t.ID)
			}
			return nil
		}
		return admins.Put([]byte(t.ID), encodeAdminToken(&t))
	})
}

// RevokeAdminToken implements ledger.Store; revoking twice is a no-op.
func (s *Store) RevokeAdminToken(ctx context.Context, id string) (t ledger.AdminToken, err error) {
	err = s.update(ctx, func(x *txn) error {
		admins := x.bucket(bucketAdmins)
		v := admins.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("%w: admin token %q", ledger.ErrNotFound, id)
		}
		if t, err = decodeAdminToken([]byte(id), v); err != nil || t.Revoked {
			return err
		}
		t.Revoked = true
		return admins.Put([]byte(id), encodeAdminToken(&t))
	})
	if err != nil {
		return ledger.AdminToken{}, err
	}
	return t, nil
}

// AdminTokens implements ledger.Store: every admin token, in id order.
func (s *Store) AdminTokens(ctx context.Context) (out []ledger.AdminToken, err error) {
	err = s.view(ctx, func(x *txn) error {
		return x.bucket(bucketAdmins).ForEach(func(id, v []byte) error {
			t, err := decodeAdminToken(id, v)
			out = append(out, t)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
