package core

import (
	"testing"

	"pgregory.net/rapid"
)

func TestBucketStartsFullAndRefillsExactly(t *testing.T) {
	var b bucket
	now := int64(1e12)
	for i := range 5 {
		if ok, _ := b.take(1, 2, 5, now); !ok {
			t.Fatalf("take %d of a full burst of 5 refused", i)
		}
	}
	ok, wait := b.take(1, 2, 5, now)
	if ok || wait != 500_000_000 {
		t.Fatalf("empty bucket: ok=%v wait=%d, want false, 0.5s", ok, wait)
	}
	if ok, _ := b.take(1, 2, 5, now+wait-1); ok {
		t.Fatal("token granted 1ns early")
	}
	if ok, _ := b.take(1, 2, 5, now+wait); !ok {
		t.Fatal("token refused at the advertised time")
	}
}

func TestBucketBackwardsTimeAddsNothing(t *testing.T) {
	var b bucket
	b.take(3, 1, 3, 10e9)
	if ok, _ := b.take(1, 1, 3, 5e9); ok {
		t.Fatal("backwards clock refilled the bucket")
	}
}

func TestBucketLoweredBurstClamps(t *testing.T) {
	var b bucket
	b.take(0, 10, 100, 1e9)
	if ok, _ := b.take(11, 10, 10, 1e9); ok {
		t.Fatal("level above the new burst was spendable")
	}
}

// TestBucketNeverExceedsRatePlusBurst is the limit property: over any run of
// takes, tokens granted ≤ burst + rate × elapsed seconds, and a refusal's
// wait is exact (taking at now+wait succeeds).
func TestBucketNeverExceedsRatePlusBurst(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := rapid.Uint32Range(1, 1_000_000).Draw(t, "rate")
		burst := rapid.Uint32Range(1, 1_000_000).Draw(t, "burst")
		var b bucket
		start := int64(1e12)
		now := start
		var granted uint64
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			now += rapid.Int64Range(0, 2e9).Draw(t, "dt")
			n := rapid.Uint64Range(1, uint64(burst)).Draw(t, "n")
			ok, wait := b.take(n, rate, burst, now)
			if ok {
				granted += n
			} else {
				probe := b
				if ok2, _ := probe.take(n, rate, burst, now+wait); !ok2 {
					t.Fatalf("advertised wait %d ns was not enough", wait)
				}
				if wait > 1 {
					probe = b
					if ok2, _ := probe.take(n, rate, burst, now+wait-1); ok2 {
						t.Fatalf("advertised wait %d ns was more than needed", wait)
					}
				}
			}
			elapsed := uint64(now - start)
			bound := uint64(burst) + elapsed*uint64(rate)/tokenScale
			if granted > bound {
				t.Fatalf("granted %d > burst+rate×t = %d", granted, bound)
			}
		}
	})
}
