package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/ledger"
)

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
