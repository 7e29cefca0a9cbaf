package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

const keyColumns = "id, account, name, digest, created_at, expires_at, last_used, revoked"

func scanKey(row pgx.Row) (ledger.Key, error) {
	var k ledger.Key
	var account string
	var digest []byte
	if err := row.Scan(&k.ID, &account, &k.Name, &digest, &k.CreatedAt, &k.ExpiresAt, &k.LastUsed, &k.Revoked); err != nil {
		return k, err
	}
	if len(digest) != len(k.Digest) {
		return k, fmt.Errorf("%w: key %s has a digest of %d bytes", ErrCorrupt, k.ID, len(digest))
	}
	k.Account, k.Digest = core.AccountID(account), [32]byte(digest)
	return k, nil
}

// validKey checks what can be checked about k without the database.
func validKey(k *ledger.Key) error {
	if err := validName("key", k.ID); err != nil {
		return err
	}
	if err := k.Account.Validate(); err != nil {
		return fmt.Errorf("%w: key %s: %w", ledger.ErrInvalid, k.ID, err)
	}
	return validLabel("key name", k.Name)
}

// AddKey implements ledger.Store. The account must exist. Adding a key
// whose id exists is a no-op if the record is identical, else ErrConflict.
func (s *Store) AddKey(ctx context.Context, k ledger.Key) error {
	if err := validKey(&k); err != nil {
		return err
	}
	return s.update(ctx, func(x *txn) error {
		if _, err := readAccount(ctx, x.tx, k.Account); err != nil {
			return err
		}
		return x.addKey(&k)
	})
}

// addKey inserts k, or does nothing if the identical record is stored.
// The caller has checked that k's account exists.
func (x *txn) addKey(k *ledger.Key) error {
	tag, err := x.tx.Exec(x.ctx, "INSERT INTO keys ("+keyColumns+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
		k.ID, string(k.Account), k.Name, k.Digest[:], k.CreatedAt, k.ExpiresAt, k.LastUsed, k.Revoked)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 {
		x.change(ChangeKey, k.Account, k.ID, "")
		return nil
	}
	old, err := scanKey(x.tx.QueryRow(x.ctx, "SELECT "+keyColumns+" FROM keys WHERE id = $1", k.ID))
	if err != nil {
		return err
	}
	if old != *k {
		return fmt.Errorf("%w: key %s", ledger.ErrConflict, k.ID)
	}
	return nil
}

// lockKey locks key id of account; a key of another account is
// ErrNotFound (the caller learns nothing about it).
func (x *txn) lockKey(account core.AccountID, id string) (ledger.Key, error) {
	if validText("key id", id) != nil {
		return ledger.Key{}, fmt.Errorf("%w: key %q", ledger.ErrNotFound, id)
	}
	k, err := scanKey(x.tx.QueryRow(x.ctx, "SELECT "+keyColumns+" FROM keys WHERE id = $1 FOR UPDATE", id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.Key{}, fmt.Errorf("%w: key %q", ledger.ErrNotFound, id)
	case err != nil:
		return ledger.Key{}, err
	case k.Account != account:
		return ledger.Key{}, fmt.Errorf("%w: key %q of %s", ledger.ErrNotFound, id, account)
	}
	return k, nil
}

// RevokeKey implements ledger.Store. A key of another account is
// ErrNotFound; revoking twice returns the revoked key and changes nothing.
func (s *Store) RevokeKey(ctx context.Context, account core.AccountID, keyID string) (k ledger.Key, err error) {
	err = s.update(ctx, func(x *txn) error {
		if k, err = x.lockKey(account, keyID); err != nil || k.Revoked {
			return err
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
	query, args := "SELECT "+keyColumns+" FROM keys ORDER BY id", []any{}
	if account != "" {
		if account.Validate() != nil {
			return nil, nil // no key belongs to an account that cannot exist
		}
		query, args = "SELECT "+keyColumns+" FROM keys WHERE account = $1 ORDER BY id", []any{string(account)}
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Key, error) { return scanKey(row) })
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// RotateKey implements ledger.Store: the new key is added and the old
// one's expiry moved (never later than it was) in one transaction; both
// are changes of the log.
func (s *Store) RotateKey(ctx context.Context, account core.AccountID, oldID string, next ledger.Key, oldExpiresAt int64) (old ledger.Key, err error) {
	if err := validKey(&next); err != nil {
		return ledger.Key{}, err
	}
	if next.Account != account || next.ID == oldID || next.Revoked || oldExpiresAt == 0 {
		return ledger.Key{}, fmt.Errorf("%w: rotating %s of %s into %+v until %d", ledger.ErrInvalid, oldID, account, next, oldExpiresAt)
	}
	err = s.update(ctx, func(x *txn) error {
		if old, err = x.lockKey(account, oldID); err != nil {
			return err
		}
		if old.Revoked {
			return fmt.Errorf("%w: key %s of %s is revoked", ledger.ErrConflict, oldID, account)
		}
		if old.ExpiresAt == 0 || oldExpiresAt < old.ExpiresAt {
			old.ExpiresAt = oldExpiresAt
			x.queue("UPDATE keys SET expires_at = $2 WHERE id = $1", affects("moving a key's expiry", 1), oldID, oldExpiresAt)
			x.change(ChangeKey, account, oldID, "")
		}
		return x.addKey(&next)
	})
	if err != nil {
		return ledger.Key{}, err
	}
	return old, nil
}

// expireKeysSQL revokes up to $2 live keys expiring at or before $1,
// earliest first (through keys_due), skipping keys another transaction
// holds (another node's pass, or a rotation): every node may run it at
// once, and no key is expired twice.
const expireKeysSQL = `WITH due AS (
		SELECT id FROM keys WHERE NOT revoked AND expires_at <> 0 AND expires_at <= $1
		ORDER BY expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
	UPDATE keys AS k SET revoked = true FROM due WHERE k.id = due.id
	RETURNING ` + "k.id, k.account, k.name, k.digest, k.created_at, k.expires_at, k.last_used, k.revoked"

// ExpireKeys implements ledger.Store: the keys it revoked, earliest expiry
// first, each a change of the log.
func (s *Store) ExpireKeys(ctx context.Context, now int64, limit int) (out []ledger.Key, err error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: key expiry limit %d", ledger.ErrInvalid, limit)
	}
	err = s.update(ctx, func(x *txn) error {
		rows, err := x.tx.Query(ctx, expireKeysSQL, now, limit)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Key, error) { return scanKey(row) }); err != nil {
			return err
		}
		slices.SortFunc(out, func(a, b ledger.Key) int { // RETURNING has no order of its own
			return cmp.Or(cmp.Compare(a.ExpiresAt, b.ExpiresAt), strings.Compare(a.ID, b.ID))
		})
		for _, k := range out {
			x.change(ChangeKey, k.Account, k.ID, "")
		}
		return nil
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// markKeysUsedSQL raises each key's last_used to the latest report of it,
// locking the keys it changes in id order.
const markKeysUsedSQL = `WITH reported AS (
		SELECT id, max(at) AS at FROM unnest($1::text[], $2::bigint[]) AS u(id, at) GROUP BY id),
	raised AS (
		SELECT k.id, r.at FROM keys AS k JOIN reported AS r ON r.id = k.id
		WHERE k.last_used < r.at ORDER BY k.id FOR UPDATE OF k)
	UPDATE keys AS k SET last_used = raised.at FROM raised WHERE k.id = raised.id`

// MarkKeysUsed implements ledger.Store, in one statement. Unknown ids,
// and ids no key can have (text PostgreSQL cannot hold), are skipped. A
// key's last use is not a change of the log: it is the data plane's
// traffic, reported in batches.
func (s *Store) MarkKeysUsed(ctx context.Context, uses []ledger.KeyUse) error {
	ids, at := make([]string, 0, len(uses)), make([]int64, 0, len(uses))
	for _, u := range uses {
		if validName("key", u.ID) == nil {
			ids, at = append(ids, u.ID), append(at, u.At)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return s.update(ctx, func(x *txn) error {
		_, err := x.tx.Exec(ctx, markKeysUsedSQL, ids, at)
		return err
	})
}
