package boltstore

import (
	"context"
	"testing"

	"github.com/tollgated/tollgated/ledger"
)

// TestUsageHistoryKeepsTheNewest: each account keeps its last
// UsageHistory accepted events; older ones are deleted as new ones come.
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
		if n := x.bucket(bucketUsage).Bucket([]byte("org")).Stats().KeyN; n != 3 {
			t.Errorf("%d usage records stored, want 3", n)
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
