package boltstore

import (
	"context"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
)

// eventAgeKey orders event ids by when they were ingested.
func eventAgeKey(ingestedAt int64, id [16]byte) []byte {
	return append(timeKey(make([]byte, 0, 8+len(id)), ingestedAt), id[:]...)
}

// ForgetEvents implements ledger.Store: it walks the ingest-time index
// from its oldest entry and drops each id, in one transaction.
func (s *Store) ForgetEvents(ctx context.Context, before int64, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: limit %d", ledger.ErrInvalid, limit)
	}
	if before == math.MinInt64 {
		return 0, nil
	}
	if due, err := s.due(ctx, bucketEventAge, before-1); !due || err != nil {
		return 0, err
	}
	n := 0
	err := s.update(ctx, func(x *txn) error {
		n = 0
		seen, age := x.bucket(bucketEvents), x.bucket(bucketEventAge)
		c := age.Cursor()
		for k, _ := c.First(); k != nil && n < limit && keyTime(k) < before; k, _ = c.First() {
			if err := seen.Delete(k[8:]); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
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

// due reports whether bucket, a time-ordered index, has an entry timed at
// or before t. The periodic passes (forgetting, reclaim, rollover) ask in a
// read transaction first: a write transaction's commit is an fsync even
// when it changes nothing, and an idle node runs them every second.
func (s *Store) due(ctx context.Context, bucket []byte, t int64) (bool, error) {
	found := false
	err := s.view(ctx, func(x *txn) error {
		k, _ := x.bucket(bucket).Cursor().First()
		found = k != nil && keyTime(k) <= t
		return nil
	})
	return found, err
}
