package boltstore

// Accounts' recent usage (UsageOf, ListUsage).
//
// Each account has a bucket of its recent billed events, numbered by the
// bucket's own sequence. A transaction writes the events it billed for an
// account as one record — a run, keyed by the sequence of its first event
// and a runMarker byte — not one record per event: a settlement of
// thousands of events costs one B-tree insert per account, not one per
// request. The history's bound is kept exactly by the readers (an event
// more than Options.UsageHistory behind the bucket's sequence is not
// there), and runs wholly past it are deleted as new ones come.
//
// Ledgers of schema 4 hold one record per event, keyed by its sequence
// alone (8 bytes); both kinds sort by their first 8 bytes, so readers and
// the trimming read them side by side, and the upgrade to schema 5 only
// bumps the version (so that a schema-4 build refuses a file with runs).
//
// A record the trimming cannot read is left where it is: the history is
// not what bills, and a damaged one must not stop a settlement. Readers
// report it (ErrCorrupt) when they reach it.

import (
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// runMarker follows the sequence in a run's key.
const runMarker = 'r'

// usageRuns gathers a transaction's billed events per account, in order.
type usageRuns struct {
	order []core.AccountID
	by    map[core.AccountID][]*ledger.Usage
}

func (r *usageRuns) add(u *ledger.Usage) {
	if r.by == nil {
		r.by = make(map[core.AccountID][]*ledger.Usage)
	}
	if _, ok := r.by[u.Account]; !ok {
		r.order = append(r.order, u.Account)
	}
	c := *u
	r.by[u.Account] = append(r.by[u.Account], &c)
}

// keep writes the runs to the accounts' histories and trims what fell
// out of the last history events.
func (x *boltTx) keepUsage(r *usageRuns, history uint64) error {
	for _, id := range r.order {
		events := r.by[id]
		b, err := x.bucket(bucketUsage).CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		first := b.Sequence() + 1
		last := first + uint64(len(events)) - 1
		if err := b.SetSequence(last); err != nil {
			return err
		}
		// Only the events the history keeps are written.
		if skip := len(events) - int(min(uint64(len(events)), history)); skip > 0 {
			events, first = events[skip:], first+uint64(skip)
		}
		if err := b.Put(runKey(first), encodeRun(events)); err != nil {
			return err
		}
		if err := trimUsage(b, last, history); err != nil {
			return err
		}
	}
	return nil
}

func runKey(first uint64) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 9), first), runMarker)
}

// encodeRun is a run's value: the count, then each event's encodeUsage
// with its length.
func encodeRun(events []*ledger.Usage) []byte {
	out := binary.AppendUvarint(make([]byte, 0, 16+64*len(events)), uint64(len(events)))
	for _, u := range events {
		e := encodeUsage(u)
		out = binary.AppendUvarint(out, uint64(len(e)))
		out = append(out, e...)
	}
	return out
}

// runEntries splits a run's value into its events' encodings, without
// decoding them.
func runEntries(v []byte) ([][]byte, error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)) {
		return nil, fmt.Errorf("%w: usage run count", ErrCorrupt)
	}
	v = v[k:]
	out := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(v)
		if k <= 0 || l > uint64(len(v)-k) {
			return nil, fmt.Errorf("%w: usage run entry", ErrCorrupt)
		}
		out = append(out, v[k:k+int(l)])
		v = v[k+int(l):]
	}
	if len(v) != 0 {
		return nil, fmt.Errorf("%w: usage run has %d bytes past its events", ErrCorrupt, len(v))
	}
	return out, nil
}

// runSpan reads a history record's key and value: the sequence of its
// first event and how many it holds (at least one, none past newest).
func runSpan(k, v []byte, newest uint64) (first, n uint64, err error) {
	switch {
	case len(k) == 8: // one event, schema 4
		first, n = binary.BigEndian.Uint64(k), 1
	case len(k) == 9 && k[8] == runMarker:
		var m int
		first = binary.BigEndian.Uint64(k)
		if n, m = binary.Uvarint(v); m <= 0 {
			return 0, 0, fmt.Errorf("%w: usage run %x: count", ErrCorrupt, k)
		}
	default:
		return 0, 0, fmt.Errorf("%w: usage record key %x", ErrCorrupt, k)
	}
	if first == 0 || n == 0 || first > newest || n > newest-first+1 {
		return 0, 0, fmt.Errorf("%w: usage record %x holds %d events from %d, past the newest %d", ErrCorrupt, k, n, first, newest)
	}
	return first, n, nil
}

// trimUsage deletes the records whose every event is more than history
// behind last, oldest first.
func trimUsage(b *bolt.Bucket, last, history uint64) error {
	if last <= history {
		return nil
	}
	cutoff := last - history // events at or below it are gone
	c := b.Cursor()
	for k, v := c.First(); k != nil; {
		first, n, err := runSpan(k, v, last)
		if err != nil { // left for the readers to report (see above)
			k, v = c.Next()
			continue
		}
		if first+n-1 > cutoff {
			return nil
		}
		key := slices.Clone(k)
		if err := c.Delete(); err != nil {
			return err
		}
		k, v = c.Seek(key) // the record after it (Next may skip one after a Delete)
	}
	return nil
}

// eachUsageBack calls fn with the history's events from newest to oldest,
// starting below the sequence before (0: from the newest), skipping what
// is more than history behind the newest, until fn returns false.
func eachUsageBack(b *bolt.Bucket, history, before uint64, fn func(seq uint64, u ledger.Usage) bool) error {
	newest := b.Sequence()
	cutoff := uint64(0)
	if newest > history {
		cutoff = newest - history
	}
	if before == 0 || before > newest+1 {
		before = newest + 1
	}
	c := b.Cursor()
	// The record holding before-1 starts at or below it: the last key
	// whose first 8 bytes are below before.
	k, v := c.Seek(binary.BigEndian.AppendUint64(nil, before))
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil; k, v = c.Prev() {
		first, n, err := runSpan(k, v, newest)
		if err != nil {
			return err
		}
		var entries [][]byte // the encoded events, oldest first
		if len(k) == 8 {
			entries = [][]byte{v}
		} else if entries, err = runEntries(v); err != nil {
			return fmt.Errorf("usage run %x: %w", k, err)
		}
		if uint64(len(entries)) != n {
			return fmt.Errorf("%w: usage run %x holds %d events, says %d", ErrCorrupt, k, len(entries), n)
		}
		// Only the events a reader takes are decoded: a run may hold a
		// whole settlement's thousands.
		for i := len(entries) - 1; i >= 0; i-- {
			seq := first + uint64(i)
			if seq >= before {
				continue
			}
			if seq <= cutoff {
				return nil
			}
			u, err := decodeUsage(entries[i])
			if err != nil {
				return fmt.Errorf("usage %d of record %x: %w", seq, k, err)
			}
			if !fn(seq, u) {
				return nil
			}
		}
		if first <= cutoff+1 {
			return nil // everything older is past the bound, unread
		}
	}
	return nil
}
