package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/ledger"
)

const adminTokenColumns = "id, name, digest, created_at, revoked, role"

func scanAdminToken(row pgx.Row) (ledger.AdminToken, error) {
	var t ledger.AdminToken
	var digest []byte
	if err := row.Scan(&t.ID, &t.Name, &digest, &t.CreatedAt, &t.Revoked, &t.Role); err != nil {
		return t, err
	}
	if len(digest) != len(t.Digest) {
		return t, fmt.Errorf("%w: admin token %s has a digest of %d bytes", ErrCorrupt, t.ID, len(digest))
	}
	t.Digest = [32]byte(digest)
	return t, nil
}

// AdminTokenDigest implements ledger.Store: the bootstrap admin token's
// digest, revoked or not.
func (s *Store) AdminTokenDigest(ctx context.Context) (d [32]byte, ok bool, err error) {
	t, err := scanAdminToken(s.pool.QueryRow(ctx, "SELECT "+adminTokenColumns+" FROM admin_tokens WHERE id = $1",
		ledger.BootstrapAdminTokenID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, false, nil
	case err != nil:
		return d, false, err
	}
	return t.Digest, true, nil
}

// SetAdminTokenDigest implements ledger.Store: the first digest wins, so
// nodes bootstrapping at once agree on one admin token, and a revoked
// bootstrap token is never replaced.
func (s *Store) SetAdminTokenDigest(ctx context.Context, d [32]byte) (stored bool, err error) {
	err = s.update(ctx, func(x *txn) error {
		tag, err := x.tx.Exec(ctx, "INSERT INTO admin_tokens ("+adminTokenColumns+") VALUES ($1, $1, $2, 0, false, $3) ON CONFLICT (id) DO NOTHING",
			ledger.BootstrapAdminTokenID, d[:], ledger.RoleAdmin)
		stored = err == nil && tag.RowsAffected() == 1
		if stored {
			x.change(ChangeAdminToken, "", "", ledger.BootstrapAdminTokenID)
		}
		return err
	})
	return stored && err == nil, err
}

// AddAdminToken implements ledger.Store, with AddKey's idempotency. The
// bootstrap id is SetAdminTokenDigest's alone.
func (s *Store) AddAdminToken(ctx context.Context, t ledger.AdminToken) error {
	if err := validName("admin token", t.ID); err != nil {
		return err
	}
	if t.ID == ledger.BootstrapAdminTokenID {
		return fmt.Errorf("%w: admin token id %q is the bootstrap token's", ledger.ErrInvalid, t.ID)
	}
	if err := validLabel("admin token name", t.Name); err != nil {
		return err
	}
	if !ledger.ValidRole(t.Role) {
		return fmt.Errorf("%w: admin token %q has no role %q", ledger.ErrInvalid, t.ID, t.Role)
	}
	return s.update(ctx, func(x *txn) error {
		tag, err := x.tx.Exec(ctx, "INSERT INTO admin_tokens ("+adminTokenColumns+") VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
			t.ID, t.Name, t.Digest[:], t.CreatedAt, t.Revoked, t.Role)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			x.change(ChangeAdminToken, "", "", t.ID)
			return nil
		}
		old, err := scanAdminToken(x.tx.QueryRow(ctx, "SELECT "+adminTokenColumns+" FROM admin_tokens WHERE id = $1", t.ID))
		if err != nil {
			return err
		}
		if old != t {
			return fmt.Errorf("%w: admin token %s", ledger.ErrConflict, t.ID)
		}
		return nil
	})
}

// RevokeAdminToken implements ledger.Store; revoking twice is a no-op.
func (s *Store) RevokeAdminToken(ctx context.Context, id string) (t ledger.AdminToken, err error) {
	if validText("admin token id", id) != nil {
		return ledger.AdminToken{}, fmt.Errorf("%w: admin token %q", ledger.ErrNotFound, id)
	}
	err = s.update(ctx, func(x *txn) error {
		t, err = scanAdminToken(x.tx.QueryRow(ctx, "SELECT "+adminTokenColumns+" FROM admin_tokens WHERE id = $1 FOR UPDATE", id))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: admin token %q", ledger.ErrNotFound, id)
		case err != nil || t.Revoked:
			return err
		}
		t.Revoked = true
		x.queue("UPDATE admin_tokens SET revoked = true WHERE id = $1", affects("revoking an admin token", 1), id)
		x.change(ChangeAdminToken, "", "", id)
		return nil
	})
	if err != nil {
		return ledger.AdminToken{}, err
	}
	return t, nil
}

// AdminTokens implements ledger.Store: every admin token, in id order.
func (s *Store) AdminTokens(ctx context.Context) ([]ledger.AdminToken, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+adminTokenColumns+" FROM admin_tokens ORDER BY id")
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.AdminToken, error) { return scanAdminToken(row) })
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

const settingSecretFingerprint = "secret_fingerprint"

// SecretFingerprint implements ledger.Store.
func (s *Store) SecretFingerprint(ctx context.Context) (fp [32]byte, ok bool, err error) {
	var v []byte
	err = s.pool.QueryRow(ctx, "SELECT value FROM settings WHERE name = $1", settingSecretFingerprint).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fp, false, nil
	case err != nil:
		return fp, false, err
	case len(v) != len(fp):
		return fp, false, fmt.Errorf("%w: secret fingerprint of %d bytes", ErrCorrupt, len(v))
	}
	return [32]byte(v), true, nil
}

// SetSecretFingerprint implements ledger.Store: the first fingerprint
// wins, so every node of a fleet is held to the secret the first one
// started with.
func (s *Store) SetSecretFingerprint(ctx context.Context, fp [32]byte) (stored bool, err error) {
	err = s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
			settingSecretFingerprint, fp[:])
		stored = err == nil && tag.RowsAffected() == 1
		return err
	})
	return stored && err == nil, err
}
