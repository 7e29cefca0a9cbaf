package boltstore

import (
	"context"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/ledger"
)

// TestUsageHistoryKeepsTheNewest: each account keeps its last
// UsageHistory accepted events, a transaction's as one record; records
// wholly older are deleted as new ones come.
func TestUsageHistoryKeepsTheNewest(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{UsageHistory: 3})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	var events []ledger.Usage
	for i := range 5 {
		events = append(events, ledger.Usage{ID: [16]byte{byte(i + 1)}, Account: "org", Source: ledger.UsageOverage, Units: 1, OccurredAt: int64(i)})
	}
	events = append(events, ledger.Usage{ID: [16]byte{9}, Account: "org", Source: ledger.UsageOverage}) // rejected: not kept
	if _, err := s.Ingest(ctx, events[:2], t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ingest(ctx, events[2:], t0); err != nil {
		t.Fatal(err)
	}
	got, err := s.UsageOf(ctx, "org", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].OccurredAt != 4 || got[1].OccurredAt != 3 || got[2].OccurredAt != 2 {
		t.Fatalf("usage %+v, want events 4, 3, 2", got)
	}
	err = s.view(ctx, func(x *txn) error {
		// One run per transaction: the first (events 1 and 2) fell wholly
		// out of the last 3 and was deleted.
		if n := x.bucket(bucketUsage).Bucket([]byte("org")).Stats().KeyN; n != 1 {
			t.Errorf("%d usage records stored, want 1", n)
		}
		if n := x.bucket(bucketEvents).Stats().KeyN; n != 6 {
			t.Errorf("%d event ids recorded, want 6 (rejected ones too)", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := s.Account(ctx, "org"); a.Settled != 5 || a.Overage != 5 {
		t.Fatalf("account %+v", a)
	}
}

// TestUsageHistoryReadsRecordsOfEveryAge: a ledger written before runs
// holds one record per event; new runs go beside them, and UsageOf,
// ListUsage's pages and the trimming read both, newest first, within the
// bound.
func TestUsageHistoryReadsRecordsOfEveryAge(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{UsageHistory: 6})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	event := func(i int) ledger.Usage {
		return ledger.Usage{ID: [16]byte{byte(i)}, Account: "org", Source: ledger.UsageOverage, Units: 1, OccurredAt: int64(i)}
	}
	// Events 1–3 as an older build wrote them: one record each.
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketUsage).CreateBucketIfNotExists([]byte("org"))
		if err != nil {
			return err
		}
		for i := 1; i <= 3; i++ {
			seq, _ := b.NextSequence()
			u := event(i)
			if err := b.Put(u64Key(seq), encodeUsage(&u)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Events 4–5, then 6–8, as runs.
	for _, batch := range [][]int{{4, 5}, {6, 7, 8}} {
		var evs []ledger.Usage
		for _, i := range batch {
			evs = append(evs, event(i))
		}
		if _, err := s.Ingest(ctx, evs, t0); err != nil {
			t.Fatal(err)
		}
	}
	times := func(us []ledger.Usage) (out []int64) {
		for _, u := range us {
			out = append(out, u.OccurredAt)
		}
		return out
	}
	want := []int64{8, 7, 6, 5, 4, 3} // the last 6
	got, err := s.UsageOf(ctx, "org", 100)
	if err != nil || !slices.Equal(times(got), want) {
		t.Fatalf("UsageOf: %v, %v; want %v", times(got), err, want)
	}
	var paged []ledger.Usage
	for after := ""; ; {
		page, next, err := s.ListUsage(ctx, "org", ledger.Page{Limit: 4, After: after})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(times(paged), want) {
		t.Fatalf("ListUsage pages: %v, want %v", times(paged), want)
	}
	// Events 1 and 2 are past the bound: their records were deleted; 3's
	// is kept, its event still within the last 6.
	err = s.view(ctx, func(x *txn) error {
		if n := x.bucket(bucketUsage).Bucket([]byte("org")).Stats().KeyN; n != 3 {
			t.Errorf("%d usage records stored, want 3 (event 3, run 4–5, run 6–8)", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
