package boltstore

import (
	"context"
	"math"
	"testing"

	"github.com/tollgated/tollgated/ledger"
)

// TestReclaimAtTheEdgesOfTime: the cutoff now − grace is computed without
// overflow, and leases expiring at the extremes are found in order.
func TestReclaimAtTheEdgesOfTime(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "org"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Deposit(ctx, "org", 1000, "d", t0); err != nil {
		t.Fatal(err)
	}
	early, _, err := s.Acquire(ctx, "org", "node-a", 1, 0, 1, math.MinInt64) // expires at MinInt64+1
	if err != nil {
		t.Fatal(err)
	}
	late, _, err := s.Acquire(ctx, "org", "node-a", 1, 0, 1, math.MaxInt64-1) // expires at MaxInt64
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Reclaim(ctx, math.MinInt64+5, 10, 10); n != 0 || err != nil {
		t.Fatalf("grace reaching before the start of time: %d, %v", n, err)
	}
	if n, err := s.Reclaim(ctx, math.MinInt64+1, 0, 10); n != 1 || err != nil {
		t.Fatalf("reclaim the earliest: %d, %v", n, err)
	}
	if n, err := s.Reclaim(ctx, math.MaxInt64-1, 0, 10); n != 0 || err != nil {
		t.Fatalf("1ns before the latest expiry: %d, %v", n, err)
	}
	if n, err := s.Reclaim(ctx, math.MaxInt64, math.MaxInt64, 10); n != 0 || err != nil {
		t.Fatalf("huge grace: %d, %v", n, err)
	}
	if n, err := s.Reclaim(ctx, math.MaxInt64, 0, 10); n != 1 || err != nil {
		t.Fatalf("reclaim the latest: %d, %v", n, err)
	}
	if active, err := s.Leases(ctx, true); len(active) != 0 || err != nil {
		t.Fatalf("leases %d and %d reclaimed, still active: %+v, %v", early.ID, late.ID, active, err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
