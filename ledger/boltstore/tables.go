package boltstore

import (
	"bytes"
	"fmt"

	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// bucketTable is a bucket of records by id (txn.Table): keys, platform
// tokens, admin tokens.
type bucketTable[T any] struct {
	x      *boltTx
	name   []byte
	what   string
	id     func(*T) string
	encode func(*T) []byte
	decode func(id, v []byte) (T, error)
	// indexes moves the index entries that follow a record from was (nil
	// for a new one) to now; nil if there are none.
	indexes func(x *boltTx, was, now *T) error
}

func (t bucketTable[T]) get(id string) (rec T, found bool, err error) {
	v := t.x.bucket(t.name).Get([]byte(id))
	if v == nil {
		return rec, false, nil
	}
	rec, err = t.decode([]byte(id), v)
	return rec, err == nil, err
}

func (t bucketTable[T]) Insert(rec *T) (T, bool, error) {
	if old, found, err := t.get(t.id(rec)); found || err != nil {
		return old, false, err
	}
	return *rec, true, t.Put(nil, rec)
}

func (t bucketTable[T]) Lock(id string) (T, error) {
	rec, found, err := t.get(id)
	if !found && err == nil {
		err = fmt.Errorf("%w: %s %q", ledger.ErrNotFound, t.what, id)
	}
	return rec, err
}

func (t bucketTable[T]) Put(was, now *T) error {
	if err := t.x.bucket(t.name).Put([]byte(t.id(now)), t.encode(now)); err != nil {
		return err
	}
	if t.indexes == nil {
		return nil
	}
	return t.indexes(t.x, was, now)
}

// Keys implements txn.Tx.
func (x *boltTx) Keys() txn.Table[ledger.Key] {
	return bucketTable[ledger.Key]{x: x, name: bucketKeys, what: "key", id: func(k *ledger.Key) string { return k.ID },
		encode: encodeKey, decode: decodeKey, indexes: keyIndexes}
}

// keyIndexes files a new key under its account, and moves its expiry
// index entry.
func keyIndexes(x *boltTx, was, now *ledger.Key) error {
	var from []byte
	if was == nil {
		if err := x.bucket(bucketKeyIndex).Put(pairKey(now.Account, now.ID), nil); err != nil {
			return err
		}
	} else {
		from = keyExpiryKey(was)
	}
	return moveIndex(x.bucket(bucketKeyExp), from, keyExpiryKey(now))
}

// keyExpiryKey indexes a live key with an expiry by when it expires.
func keyExpiryKey(k *ledger.Key) []byte {
	if k.Revoked || k.ExpiresAt == 0 {
		return nil
	}
	return append(timeKey(make([]byte, 0, 8+len(k.ID)), k.ExpiresAt), k.ID...)
}

// PlatformTokens implements txn.Tx.
func (x *boltTx) PlatformTokens() txn.Table[ledger.PlatformToken] {
	return bucketTable[ledger.PlatformToken]{x: x, name: bucketTokens, what: "platform token",
		id: func(t *ledger.PlatformToken) string { return t.ID }, encode: encodePlatformToken, decode: decodePlatformToken}
}

// AdminTokens implements txn.Tx.
func (x *boltTx) AdminTokens() txn.Table[ledger.AdminToken] {
	return bucketTable[ledger.AdminToken]{x: x, name: bucketAdmins, what: "admin token",
		id: func(t *ledger.AdminToken) string { return t.ID }, encode: encodeAdminToken, decode: decodeAdminToken}
}

// DueKeys implements txn.Tx: it walks the key expiry index from its
// earliest entry, so its cost follows what is due.
func (x *boltTx) DueKeys(now int64, limit int) ([]ledger.Key, error) {
	var ids [][]byte
	c := x.bucket(bucketKeyExp).Cursor()
	for k, _ := c.First(); k != nil && len(ids) < limit && keyTime(k) <= now; k, _ = c.Next() {
		ids = append(ids, bytes.Clone(k[8:])) // bbolt's memory moves as the index changes
	}
	return x.indexedKeys("key expiry index", ids)
}

// indexedKeys reads the keys ids, which index names: a missing one is
// ErrCorrupt.
func (x *boltTx) indexedKeys(index string, ids [][]byte) ([]ledger.Key, error) {
	keys := x.Keys().(bucketTable[ledger.Key])
	out := make([]ledger.Key, 0, len(ids))
	for _, id := range ids {
		k, found, err := keys.get(string(id))
		if err == nil && !found {
			err = fmt.Errorf("%w: %s names missing key %q", ErrCorrupt, index, id)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// MarkKeysUsed implements txn.Tx. Keys whose LastUsed is already at or
// past the report are not rewritten.
func (x *boltTx) MarkKeysUsed(uses []ledger.KeyUse) error {
	keys := x.Keys().(bucketTable[ledger.Key])
	for _, u := range uses {
		k, found, err := keys.get(u.ID)
		if err != nil {
			return err
		}
		if !found || u.At <= k.LastUsed {
			continue
		}
		was := k
		k.LastUsed = u.At
		if err := keys.Put(&was, &k); err != nil {
			return err
		}
	}
	return nil
}
