package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgated/tollgated/core"
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
	err = s.b.view(ctx, func(x *boltTx) error {
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
	err = s.b.view(ctx, func(x *boltTx) error {
		if n := x.bucket(bucketUsage).Bucket([]byte("org")).Stats().KeyN; n != 3 {
			t.Errorf("%d usage records stored, want 3 (event 3, run 4–5, run 6–8)", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestADamagedUsageHistoryDoesNotStopBilling: the history is not what
// bills. A record of it that cannot be read used to fail every
// transaction that trimmed past it — a settlement retried forever; now
// billing goes on, later records are still trimmed, and readers report the
// damage.
func TestADamagedUsageHistoryDoesNotStopBilling(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{UsageHistory: 2})
	for _, id := range []core.AccountID{"org", "other"} {
		if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: id}, t0); err != nil {
			t.Fatal(err)
		}
	}
	ingest := func(i int) {
		t.Helper()
		evs := []ledger.Usage{
			{ID: [16]byte{byte(i), 1}, Account: "other", Source: ledger.UsageOverage, Units: 1},
			{ID: [16]byte{byte(i), 2}, Account: "org", Source: ledger.UsageOverage, Units: 1},
		}
		res, err := s.Ingest(ctx, evs, t0)
		if err != nil || res[0] != ledger.Accepted || res[1] != ledger.Accepted {
			t.Fatalf("ingest %d: %v, %v", i, res, err)
		}
	}
	ingest(1)
	// Damage: a record with a key no build writes, oldest of org's.
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUsage).Bucket([]byte("org")).Put(append(u64Key(0), 'x'), []byte{1})
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 6; i++ {
		ingest(i)
	}
	// Readers stop at the bound, before the damaged record: older than it.
	if got, err := s.UsageOf(ctx, "org", 10); err != nil || len(got) != 2 {
		t.Fatalf("org's usage: %d events, %v", len(got), err)
	}
	// Damage within the bound is reported.
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketUsage).Bucket([]byte("org"))
		return b.Put(append(u64Key(b.Sequence()), 'x'), []byte{1})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UsageOf(ctx, "org", 10); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("UsageOf over damage within the bound: %v, want ErrCorrupt", err)
	}
	got, err := s.UsageOf(ctx, "other", 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("other's usage: %d events, %v", len(got), err)
	}
	err = s.b.view(ctx, func(x *boltTx) error {
		if n := x.bucket(bucketUsage).Bucket([]byte("org")).Stats().KeyN; n != 4 {
			t.Errorf("org holds %d records, want 4: the two damaged ones and the last two runs", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSchema4IsUpgraded: a file of schema 4 (usage history one record
// per event) opens as the current schema with its usage records as they
// were, so a schema-4 build refuses it afterwards instead of failing on
// its runs.
func TestSchema4IsUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, u64Key(4)) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, Options{}); err != nil {
		t.Fatalf("opening schema 4: %v", err)
	}
	defer s.Close()
	err = s.db.View(func(tx *bolt.Tx) error {
		if got := tx.Bucket(bucketMeta).Get(metaSchema); string(got) != string(u64Key(schemaVersion)) {
			t.Errorf("schema %x after the upgrade, want %d", got, schemaVersion)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
