package boltstore

// Upgrades. Open upgrades a file of an older schema (see schemaVersion) in
// the transaction that opens it, and refuses a newer one.

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
)

// upgrade brings the file at path to schemaVersion inside tx, creating
// every bucket, or refuses a schema it does not know.
func upgrade(tx *bolt.Tx, path string) error {
	var schema []byte
	if meta := tx.Bucket(bucketMeta); meta != nil {
		schema = meta.Get(metaSchema)
	}
	switch {
	case schema == nil: // a new file
	case string(schema) == string(u64Key(1)):
		if err := migrateFrom1(tx, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("boltstore: %s: upgrading schema 1: %w", path, err)
		}
		fallthrough
	case string(schema) == string(u64Key(2)):
		if err := migrateFrom2(tx); err != nil {
			return fmt.Errorf("boltstore: %s: upgrading schema 2: %w", path, err)
		}
		fallthrough
	case string(schema) == string(u64Key(3)):
		if err := migrateFrom3(tx); err != nil {
			return fmt.Errorf("boltstore: %s: upgrading schema 3: %w", path, err)
		}
		fallthrough
	case string(schema) == string(u64Key(4)), string(schema) == string(u64Key(5)):
		// Schema 5 reads schema 4's per-event usage records beside its
		// runs: nothing to rewrite for them.
		if err := migrateFrom5(tx); err != nil {
			return fmt.Errorf("boltstore: %s: upgrading schema 5: %w", path, err)
		}
	case string(schema) == string(u64Key(6)):
		// Schema 7 gave admin tokens a role; a token of schema 6 reads as
		// an admin (codec.go): nothing to rewrite.
	case string(schema) != string(u64Key(schemaVersion)):
		return fmt.Errorf("boltstore: %s has schema %x, this build reads %d", path, schema, schemaVersion)
	}
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(schemaVersion))
}

// migrateFrom3 settles the debts schemas up to 3 let stand beside a
// balance: schema 4 repays overage from arriving funds first (ledger.Repay), and
// L1 now refuses an account that owes while holding a balance.
func migrateFrom3(tx *bolt.Tx) error {
	b := tx.Bucket(bucketAccounts)
	type change struct {
		id []byte
		v  []byte
	}
	var changes []change
	err := b.ForEach(func(k, v []byte) error {
		a, err := decodeAccount(k, v)
		if err != nil {
			return err
		}
		if a.Overage == 0 || a.Balance() == 0 {
			return nil
		}
		fromTopUp := min(a.Overage, a.TopUpLeft)
		a.TopUpLeft -= fromTopUp
		if err := ledger.Repay(&a, &a.TopUpLeft, fromTopUp); err != nil {
			return err
		}
		fromAllowance := min(a.Overage, a.AllowanceLeft)
		a.AllowanceLeft -= fromAllowance
		if err := ledger.Repay(&a, &a.AllowanceLeft, fromAllowance); err != nil {
			return err
		}
		if err := a.Conserved(); err != nil {
			return err
		}
		changes = append(changes, change{bytes.Clone(k), encodeAccount(&a)})
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range changes {
		if err := b.Put(c.id, c.v); err != nil {
			return err
		}
	}
	return nil
}

// migrateFrom1 builds the indexes schema 2 added. A schema-1 file kept no
// ingest times, so its event ids count as ingested at now.
func migrateFrom1(tx *bolt.Tx, now int64) error {
	if tx.Bucket(bucketChildren) == nil {
		if err := indexChildren(tx); err != nil {
			return err
		}
	}
	if tx.Bucket(bucketEventAge) == nil {
		if err := indexEventAges(tx, now); err != nil {
			return err
		}
	}
	return nil
}

// migrateFrom2 rewrites every key in schema 3's layout (none had an
// expiry, so the expiry index starts empty) and turns the one admin token
// digest into the bootstrap admin token.
func migrateFrom2(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketKeyExp); err != nil {
		return err
	}
	admins, err := tx.CreateBucketIfNotExists(bucketAdmins)
	if err != nil {
		return err
	}
	keys, err := tx.CreateBucketIfNotExists(bucketKeys)
	if err != nil {
		return err
	}
	var rewritten [][2][]byte
	err = keys.ForEach(func(id, v []byte) error {
		k, err := decodeSchema2Key(id, v)
		if err != nil {
			return err
		}
		rewritten = append(rewritten, [2][]byte{bytes.Clone(id), encodeKey(&k)})
		return nil
	})
	if err != nil {
		return err
	}
	for _, kv := range rewritten { // not inside ForEach: bbolt forbids writes while iterating
		if err := keys.Put(kv[0], kv[1]); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	d := meta.Get(metaAdmin)
	if d == nil {
		return nil
	}
	if len(d) != 32 {
		return fmt.Errorf("%w: admin token digest of %d bytes", ErrCorrupt, len(d))
	}
	t := ledger.AdminToken{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: [32]byte(d), Role: ledger.RoleAdmin}
	if err := admins.Put([]byte(t.ID), encodeAdminToken(&t)); err != nil {
		return err
	}
	return meta.Delete(metaAdmin)
}

// indexChildren builds the children index of a file written before it.
func indexChildren(tx *bolt.Tx) error {
	children, err := tx.CreateBucket(bucketChildren)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketAccounts).ForEach(func(k, v []byte) error {
		a, err := decodeAccount(k, v)
		if err != nil {
			return err
		}
		if a.Parent == "" {
			return nil
		}
		return children.Put(childKey(a.Parent, a.ID), nil)
	})
}

// indexEventAges gives every id in events an ingest time of now, for a file
// written before the index existed.
func indexEventAges(tx *bolt.Tx, now int64) error {
	age, err := tx.CreateBucket(bucketEventAge)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketEvents).ForEach(func(k, _ []byte) error {
		var id [16]byte
		if len(k) != len(id) {
			return fmt.Errorf("boltstore: event id of %d bytes", len(k))
		}
		copy(id[:], k)
		return age.Put(eventAgeKey(now, id), nil)
	})
}

// migrateFrom5 builds what schema 6 added: the held index of every lease
// not released, and an incarnation 1 for every node the ledger knew — each
// export mark's node and each lease holder — so that the data directories
// that wrote them are that incarnation. They keep no grace until their
// next start (ledger.NoGrace).
func migrateFrom5(tx *bolt.Tx) error {
	held, err := tx.CreateBucketIfNotExists(bucketHeld)
	if err != nil {
		return err
	}
	nodes, err := tx.CreateBucketIfNotExists(bucketNodes)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	if leases := tx.Bucket(bucketLeases); leases != nil {
		err = leases.ForEach(func(k, v []byte) error {
			rec, err := decodeLease(seqOf(k), v)
			if err != nil {
				return err
			}
			if rec.Holder != "" {
				node, _ := ledger.ParseHolder(rec.Holder)
				known[node] = true
			}
			if hk := leaseHeldKey(&rec); hk != nil {
				return held.Put(hk, nil)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if marks := tx.Bucket(bucketMarks); marks != nil {
		err = marks.ForEach(func(k, _ []byte) error {
			node, _ := ledger.ParseHolder(string(k))
			known[node] = true
			return nil
		})
		if err != nil {
			return err
		}
	}
	for node := range known {
		if ledger.ValidateIncarnate(node, 0) != nil || nodes.Get([]byte(node)) != nil {
			continue
		}
		i := ledger.Incarnation{Node: node, Number: 1, Grace: ledger.NoGrace}
		if err := nodes.Put([]byte(node), encodeIncarnation(&i)); err != nil {
			return err
		}
	}
	return nil
}
