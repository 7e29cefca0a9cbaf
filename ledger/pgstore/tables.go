package pgstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// sqlTable is a table of records by id (txn.Table): keys, platform tokens,
// admin tokens. Every insert and every Put is a change of the log.
type sqlTable[T any] struct {
	x       *pgTx
	table   string
	what    string
	columns string // id first, in scan's order
	scan    func(pgx.Row) (T, error)
	values  func(*T) []any // columns' values
	// update writes what a script changes of a record ($1 its id),
	// from updates' values.
	update  string
	updates func(*T) []any
	change  func(*T) change
}

func (t sqlTable[T]) Insert(rec *T) (T, bool, error) {
	values := t.values(rec)
	marks := make([]string, len(values))
	for i := range marks {
		marks[i] = "$" + strconv.Itoa(i+1)
	}
	tag, err := t.x.tx.Exec(t.x.ctx, "INSERT INTO "+t.table+" ("+t.columns+") VALUES ("+strings.Join(marks, ", ")+
		") ON CONFLICT (id) DO NOTHING", values...)
	if err != nil {
		return *rec, false, err
	}
	if tag.RowsAffected() == 1 {
		t.x.changes = append(t.x.changes, t.change(rec))
		return *rec, true, nil
	}
	stored, err := t.scan(t.x.tx.QueryRow(t.x.ctx, "SELECT "+t.columns+" FROM "+t.table+" WHERE id = $1", values[0]))
	return stored, false, err
}

func (t sqlTable[T]) Lock(id string) (T, error) {
	var rec T
	if validText(t.what+" id", id, 0) != nil { // no record can have stored it
		return rec, fmt.Errorf("%w: %s %q", ledger.ErrNotFound, t.what, id)
	}
	rec, err := t.scan(t.x.tx.QueryRow(t.x.ctx, "SELECT "+t.columns+" FROM "+t.table+" WHERE id = $1 FOR UPDATE", id))
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: %s %q", ledger.ErrNotFound, t.what, id)
	}
	return rec, err
}

func (t sqlTable[T]) Put(_, now *T) error {
	t.x.queue(t.update, affects("updating a "+t.what, 1), t.updates(now)...)
	t.x.changes = append(t.x.changes, t.change(now))
	return nil
}

const keyColumns = "id, account, name, digest, created_at, expires_at, last_used, revoked"

// Keys implements txn.Tx.
func (x *pgTx) Keys() txn.Table[ledger.Key] {
	return sqlTable[ledger.Key]{x: x, table: "keys", what: "key", columns: keyColumns, scan: scanKey,
		values: func(k *ledger.Key) []any {
			return []any{k.ID, string(k.Account), k.Name, k.Digest[:], k.CreatedAt, k.ExpiresAt, k.LastUsed, k.Revoked}
		},
		update:  "UPDATE keys SET expires_at = $2, revoked = $3 WHERE id = $1",
		updates: func(k *ledger.Key) []any { return []any{k.ID, k.ExpiresAt, k.Revoked} },
		change:  func(k *ledger.Key) change { return change{kind: ChangeKey, account: string(k.Account), key: k.ID} }}
}

func scanKey(row pgx.Row) (ledger.Key, error) {
	var k ledger.Key
	var account string
	var digest []byte
	if err := row.Scan(&k.ID, &account, &k.Name, &digest, &k.CreatedAt, &k.ExpiresAt, &k.LastUsed, &k.Revoked); err != nil {
		return k, err
	}
	k.Account = core.AccountID(account)
	return k, readDigest(&k.Digest, digest, "key", k.ID)
}

// readDigest copies a stored digest into d.
func readDigest(d *[32]byte, stored []byte, what, id string) error {
	if len(stored) != len(d) {
		return fmt.Errorf("%w: %s %s has a digest of %d bytes", ErrCorrupt, what, id, len(stored))
	}
	*d = [32]byte(stored)
	return nil
}

const tokenColumns = "id, digest, created_at, revoked"

// PlatformTokens implements txn.Tx.
func (x *pgTx) PlatformTokens() txn.Table[ledger.PlatformToken] {
	return sqlTable[ledger.PlatformToken]{x: x, table: "platform_tokens", what: "platform token", columns: tokenColumns, scan: scanToken,
		values:  func(t *ledger.PlatformToken) []any { return []any{t.ID, t.Digest[:], t.CreatedAt, t.Revoked} },
		update:  "UPDATE platform_tokens SET revoked = $2 WHERE id = $1",
		updates: func(t *ledger.PlatformToken) []any { return []any{t.ID, t.Revoked} },
		change:  func(t *ledger.PlatformToken) change { return change{kind: ChangePlatformToken, token: t.ID} }}
}

func scanToken(row pgx.Row) (ledger.PlatformToken, error) {
	var t ledger.PlatformToken
	var digest []byte
	if err := row.Scan(&t.ID, &digest, &t.CreatedAt, &t.Revoked); err != nil {
		return t, err
	}
	return t, readDigest(&t.Digest, digest, "platform token", t.ID)
}

const adminTokenColumns = "id, name, digest, created_at, revoked, role"

// AdminTokens implements txn.Tx.
func (x *pgTx) AdminTokens() txn.Table[ledger.AdminToken] {
	return sqlTable[ledger.AdminToken]{x: x, table: "admin_tokens", what: "admin token", columns: adminTokenColumns, scan: scanAdminToken,
		values: func(t *ledger.AdminToken) []any {
			return []any{t.ID, t.Name, t.Digest[:], t.CreatedAt, t.Revoked, t.Role}
		},
		update:  "UPDATE admin_tokens SET revoked = $2 WHERE id = $1",
		updates: func(t *ledger.AdminToken) []any { return []any{t.ID, t.Revoked} },
		change:  func(t *ledger.AdminToken) change { return change{kind: ChangeAdminToken, token: t.ID} }}
}

func scanAdminToken(row pgx.Row) (ledger.AdminToken, error) {
	var t ledger.AdminToken
	var digest []byte
	if err := row.Scan(&t.ID, &t.Name, &digest, &t.CreatedAt, &t.Revoked, &t.Role); err != nil {
		return t, err
	}
	return t, readDigest(&t.Digest, digest, "admin token", t.ID)
}

// DueKeys implements txn.Tx through keys_due, skipping keys another
// transaction holds (another node's pass, or a rotation): every node may
// run it at once, and no key is expired twice.
func (x *pgTx) DueKeys(now int64, limit int) ([]ledger.Key, error) {
	return collect(x.ctx, x.tx, scanKey, "SELECT "+keyColumns+` FROM keys
		WHERE NOT revoked AND expires_at <> 0 AND expires_at <= $1
		ORDER BY expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
}

// markKeysUsedSQL raises each key's last_used to the latest report of it,
// locking the keys it changes in id order.
const markKeysUsedSQL = `WITH reported AS (
		SELECT id, max(at) AS at FROM unnest($1::text[], $2::bigint[]) AS u(id, at) GROUP BY id),
	raised AS (
		SELECT k.id, r.at FROM keys AS k JOIN reported AS r ON r.id = k.id
		WHERE k.last_used < r.at ORDER BY k.id FOR UPDATE OF k)
	UPDATE keys AS k SET last_used = raised.at FROM raised WHERE k.id = raised.id`

// MarkKeysUsed implements txn.Tx, in one statement. Ids no key can have
// (text PostgreSQL cannot hold) are skipped. A key's last use is not a
// change of the log: it is the data plane's traffic, reported in batches.
func (x *pgTx) MarkKeysUsed(uses []ledger.KeyUse) error {
	ids, at := make([]string, 0, len(uses)), make([]int64, 0, len(uses))
	for _, u := range uses {
		if validName("key", u.ID) == nil {
			ids, at = append(ids, u.ID), append(at, u.At)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := x.tx.Exec(x.ctx, markKeysUsedSQL, ids, at)
	return err
}
