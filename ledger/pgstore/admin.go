package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

const keyColumns = "id, account, digest, created_at, revoked"

func scanKey(row pgx.Row) (ledger.Key, error) {
	var k ledger.Key
	var account string
	var digest []byte
	if err := row.Scan(&k.ID, &account, &digest, &k.CreatedAt, &k.Revoked); err != nil {
		return k, err
	}
	if len(digest) != len(k.Digest) {
		return k, fmt.Errorf("%w: key %s has a digest of %d bytes", ErrCorrupt, k.ID, len(digest))
	}
	k.Account, k.Digest = core.AccountID(account), [32]byte(digest)
	return k, nil
}

// AddKey implements ledger.Store. The account must exist. Adding a key
// whose id exists is a no-op if the record is identical, else ErrConflict.
func (s *Store) AddKey(ctx context.Context, k ledger.Key) error {
	if err := validName("key", k.ID); err != nil {
		return err
	}
	if err := k.Account.Validate(); err != nil {
		return fmt.Errorf("%w: key %s: %w", ledger.ErrInvalid, k.ID, err)
	}
	return s.update(ctx, func(x *txn) error {
		if _, err := readAccount(ctx, x.tx, k.Account); err != nil {
			return err
		}
		tag, err := x.tx.Exec(ctx, "INSERT INTO keys ("+keyColumns+") VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
			k.ID, string(k.Account), k.Digest[:], k.CreatedAt, k.Revoked)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			x.change(ChangeKey, k.Account, k.ID, "")
			return nil
		}
		old, err := scanKey(x.tx.QueryRow(ctx, "SELECT "+keyColumns+" FROM keys WHERE id = $1", k.ID))
		if err != nil {
			return err
		}
		if old != k {
			return fmt.Errorf("%w: key %s", ledger.ErrConflict, k.ID)
		}
		return nil
	})
}

// RevokeKey implements ledger.Store. A key of another account is
// ErrNotFound (the caller learns nothing about it); revoking twice returns
// the revoked key and changes nothing.
func (s *Store) RevokeKey(ctx context.Context, account core.AccountID, keyID string) (k ledger.Key, err error) {
	if err := validText("key id", keyID); err != nil {
		return ledger.Key{}, fmt.Errorf("%w: key %q", ledger.ErrNotFound, keyID)
	}
	err = s.update(ctx, func(x *txn) error {
		k, err = scanKey(x.tx.QueryRow(ctx, "SELECT "+keyColumns+" FROM keys WHERE id = $1 FOR UPDATE", keyID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: key %q", ledger.ErrNotFound, keyID)
		case err != nil:
			return err
		case k.Account != account:
			return fmt.Errorf("%w: key %q of %s", ledger.ErrNotFound, keyID, account)
		case k.Revoked:
			return nil
		}
		k.Revoked = true
		x.queue("UPDATE keys SET revoked = true WHERE id = $1", affects("revoking a key", 1), keyID)
		x.change(ChangeKey, k.Account, k.ID, "")
		return nil
	})
	if err != nil {
		return ledger.Key{}, err
	}
	return k, nil
}

// Keys implements ledger.Store: account's keys (every key for ""), in id
// order.
func (s *Store) Keys(ctx context.Context, account core.AccountID) ([]ledger.Key, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+keyColumns+" FROM keys WHERE account = $1 OR $1 = '' ORDER BY id", string(account))
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Key, error) { return scanKey(row) })
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

const tokenColumns = "id, digest, created_at, revoked"

func scanToken(row pgx.Row) (ledger.PlatformToken, error) {
	var t ledger.PlatformToken
	var digest []byte
	if err := row.Scan(&t.ID, &digest, &t.CreatedAt, &t.Revoked); err != nil {
		return t, err
	}
	if len(digest) != len(t.Digest) {
		return t, fmt.Errorf("%w: platform token %s has a digest of %d bytes", ErrCorrupt, t.ID, len(digest))
	}
	t.Digest = [32]byte(digest)
	return t, nil
}

// AddPlatformToken implements ledger.Store, with AddKey's idempotency.
func (s *Store) AddPlatformToken(ctx context.Context, t ledger.PlatformToken) error {
	if err := validName("platform token", t.ID); err != nil {
		return err
	}
	return s.update(ctx, func(x *txn) error {
		tag, err := x.tx.Exec(ctx, "INSERT INTO platform_tokens ("+tokenColumns+") VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
			t.ID, t.Digest[:], t.CreatedAt, t.Revoked)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			x.change(ChangePlatformToken, "", "", t.ID)
			return nil
		}
		old, err := scanToken(x.tx.QueryRow(ctx, "SELECT "+tokenColumns+" FROM platform_tokens WHERE id = $1", t.ID))
		if err != nil {
			return err
		}
		if old != t {
			return fmt.Errorf("%w: platform token %s", ledger.ErrConflict, t.ID)
		}
		return nil
	})
}

// RevokePlatformToken implements ledger.Store; revoking twice is a no-op.
func (s *Store) RevokePlatformToken(ctx context.Context, id string) (t ledger.PlatformToken, err error) {
	if err := validText("platform token id", id); err != nil {
		return ledger.PlatformToken{}, fmt.Errorf("%w: platform token %q", ledger.ErrNotFound, id)
	}
	err = s.update(ctx, func(x *txn) error {
		t, err = scanToken(x.tx.QueryRow(ctx, "SELECT "+tokenColumns+" FROM platform_tokens WHERE id = $1 FOR UPDATE", id))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: platform token %q", ledger.ErrNotFound, id)
		case err != nil || t.Revoked:
			return err
		}
		t.Revoked = true
		x.queue("UPDATE platform_tokens SET revoked = true WHERE id = $1", affects("revoking a platform token", 1), id)
		x.change(ChangePlatformToken, "", "", id)
		return nil
	})
	if err != nil {
		return ledger.PlatformToken{}, err
	}
	return t, nil
}

// PlatformTokens implements ledger.Store: every token, in id order.
func (s *Store) PlatformTokens(ctx context.Context) ([]ledger.PlatformToken, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+tokenColumns+" FROM platform_tokens ORDER BY id")
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.PlatformToken, error) { return scanToken(row) })
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

const settingAdminDigest = "admin_token_digest"

// AdminTokenDigest implements ledger.Store.
func (s *Store) AdminTokenDigest(ctx context.Context) (d [32]byte, ok bool, err error) {
	var v []byte
	err = s.pool.QueryRow(ctx, "SELECT value FROM settings WHERE name = $1", settingAdminDigest).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, false, nil
	case err != nil:
		return d, false, err
	case len(v) != len(d):
		return d, false, fmt.Errorf("%w: admin token digest of %d bytes", ErrCorrupt, len(v))
	}
	return [32]byte(v), true, nil
}

// SetAdminTokenDigest implements ledger.Store: the first digest wins, so
// nodes bootstrapping at once agree on one admin token.
func (s *Store) SetAdminTokenDigest(ctx context.Context, d [32]byte) (stored bool, err error) {
	err = s.update(ctx, func(x *txn) error {
		tag, err := x.tx.Exec(ctx, "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
			settingAdminDigest, d[:])
		stored = err == nil && tag.RowsAffected() == 1
		if stored {
			x.change(ChangeAdminToken, "", "", "")
		}
		return err
	})
	return stored && err == nil, err
}

// Audit implements ledger.Store: r is stored under the next sequence
// number (from 1, without gaps: a counter row, not a sequence, assigns
// it), which is returned; r.Seq is ignored.
func (s *Store) Audit(ctx context.Context, r ledger.AuditRecord) (seq uint64, err error) {
	for what, v := range map[string]string{"audit actor": r.Actor, "audit action": r.Action, "audit target": r.Target} {
		if err := validText(what, v); err != nil {
			return 0, err
		}
	}
	err = s.update(ctx, func(x *txn) error {
		var n int64
		err := x.tx.QueryRow(ctx, `WITH next AS (UPDATE counters SET value = value + 1 WHERE name = 'audit' RETURNING value)
			INSERT INTO audit (seq, at, actor, action, target, before, after)
			SELECT value, $1, $2, $3, $4, $5, $6 FROM next RETURNING seq`,
			r.At, r.Actor, r.Action, r.Target, r.Before, r.After).Scan(&n)
		seq = uint64(n)
		return err
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// AuditLog implements ledger.Store: up to limit records with Seq > after,
// ascending.
func (s *Store) AuditLog(ctx context.Context, after uint64, limit int) ([]ledger.AuditRecord, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: audit limit %d", ledger.ErrInvalid, limit)
	}
	if after >= 1<<63-1 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, "SELECT seq, at, actor, action, target, before, after FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2",
		int64(after), limit)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.AuditRecord, error) {
		var r ledger.AuditRecord
		var seq int64
		err := row.Scan(&seq, &r.At, &r.Actor, &r.Action, &r.Target, &r.Before, &r.After)
		r.Seq = uint64(seq)
		return r, err
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}
