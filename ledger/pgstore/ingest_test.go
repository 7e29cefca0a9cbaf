package pgstore

import (
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// TestUsageHistoryKeepsTheNewest: each account keeps its last
// UsageHistory accepted events, whether they come in small batches or in
// one larger than the history; the totals count every one.
func TestUsageHistoryKeepsTheNewest(t *testing.T) {
	s, _ := openFresh(t, Options{UsageHistory: 3})
	ctx := t.Context()
	mustCreate(t, s, "org", "")
	mustCreate(t, s, "other", "")
	event := func(n int, account string) ledger.Usage {
		return ledger.Usage{ID: eventID(uint64(n)), Account: core.AccountID(account), Source: ledger.UsageOverage, Units: 1, OccurredAt: int64(n)}
	}
	var events []ledger.Usage
	for i := range 5 {
		events = append(events, event(i, "org"))
	}
	events = append(events, ledger.Usage{ID: eventID(9), Account: "org", Source: ledger.UsageOverage}) // rejected: not kept
	if _, err := s.Ingest(ctx, events[:2], t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ingest(ctx, events[2:], t0); err != nil {
		t.Fatal(err)
	}
	// One batch of 7 for other, interleaved with 1 more for org.
	var big []ledger.Usage
	for i := range 7 {
		big = append(big, event(20+i, "other"))
		if i == 3 {
			big = append(big, event(5, "org"))
		}
	}
	if _, err := s.Ingest(ctx, big, t0); err != nil {
		t.Fatal(err)
	}
	for account, want := range map[string][]int64{"org": {5, 4, 3}, "other": {26, 25, 24}} {
		got, err := s.UsageOf(ctx, core.AccountID(account), 10)
		if err != nil || len(got) != len(want) {
			t.Fatalf("usage of %s: %+v, %v", account, got, err)
		}
		for i, u := range got {
			if u.OccurredAt != want[i] {
				t.Fatalf("usage of %s: %+v, want events %v", account, got, want)
			}
		}
	}
	var stored, ids, counted int
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM usage), (SELECT count(*) FROM events),
		(SELECT sum(events) FROM usage_totals)`).Scan(&stored, &ids, &counted); err != nil {
		t.Fatal(err)
	}
	if stored != 6 || ids != 14 || counted != 13 {
		t.Fatalf("%d usage rows (want 6), %d event ids (want 14, the rejected one too), %d counted (want 13)", stored, ids, counted)
	}
	sound(t, s)
}
