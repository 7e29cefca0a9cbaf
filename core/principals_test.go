package core

import (
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// TestPrincipalTableMatchesMap runs random puts, gets and removes against a
// Go map as the oracle, including adversarial keys that collide in the mix,
// with and without a lookup cache (a tiny one, so keys evict each other).
func TestPrincipalTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab principalTable
		if sets := rapid.SampledFrom([]int{0, 1, 2, 8}).Draw(t, "cacheSets"); sets > 0 {
			tab.enableCache(sets)
		}
		oracle := map[Principal]*principalEntry{}
		keys := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Principal {
			return Principal{Hi: rapid.Uint64Range(0, 40).Draw(t, "hi"), Lo: rapid.Uint64Range(0, 3).Draw(t, "lo")}
		}), 1, 64).Draw(t, "keys")
		for range rapid.IntRange(1, 400).Draw(t, "ops") {
			k := rapid.SampledFrom(keys).Draw(t, "key")
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				e := &principalEntry{who: k}
				tab.put(k, e)
				oracle[k] = e
			case 1:
				tab.remove(k)
				delete(oracle, k)
			}
			if tab.n != len(oracle) {
				t.Fatalf("size %d, oracle %d", tab.n, len(oracle))
			}
			for _, q := range keys {
				if tab.get(q) != oracle[q] {
					t.Fatalf("get(%v) disagrees with the oracle", q)
				}
			}
		}
	})
}

func TestPrincipalWaysAreOneCacheLine(t *testing.T) {
	if size := unsafe.Sizeof(principalWays{}); size != 64 {
		t.Fatalf("principalWays is %d bytes, want 64: a set must be one line", size)
	}
}

// TestLargeTablesCacheTheirHits checks that the cache switches on with size
// and that a hit is answered from it, so the benchmark that relies on it
// cannot silently measure the bare table.
func TestLargeTablesCacheTheirHits(t *testing.T) {
	var tab principalTable
	entries := make([]principalEntry, cacheFromSlots)
	for i := range entries {
		p := Principal{Hi: uint64(i) * 0x9e3779b97f4a7c15, Lo: uint64(i)}
		entries[i].who = p
		tab.put(p, &entries[i])
	}
	if tab.cache == nil {
		t.Fatalf("no cache at %d slots", len(tab.slots))
	}
	p := entries[7].who
	if tab.get(p) != &entries[7] {
		t.Fatal("lookup missed")
	}
	w := tab.ways(p)
	if w.key[0] != p || w.e[0] != &entries[7] {
		t.Fatal("a hit was not cached")
	}
	tab.remove(p)
	if tab.get(p) != nil {
		t.Fatal("a removed principal is still found")
	}
}

// TestBeginFollowsRebindsThroughTheCache binds enough principals for the
// lookup cache to be on, warms it, then moves and revokes principals: Begin
// must see each change at once, never a cached answer from before it.
func TestBeginFollowsRebindsThroughTheCache(t *testing.T) {
	e := NewEngine(Config{MaxReservations: 8})
	for _, id := range []AccountID{"acme", "globex"} {
		s := validSnapshot()
		s.Account = id
		must(t, e.Install(s))
	}
	ps := make([]Principal, cacheFromSlots/2)
	for i := range ps {
		ps[i] = Principal{Hi: uint64(i) * 0x9e3779b97f4a7c15, Lo: uint64(i) + 1}
		must(t, e.Bind(ps[i], "acme"))
	}
	if e.principals.cache == nil {
		t.Fatalf("cache off at %d principals", len(ps))
	}
	accountOf := func(p Principal) AccountID {
		ctx, d := e.Begin(p, 0, t0)
		if d.Denied() {
			return AccountID("denied: " + d.String())
		}
		return ctx.Account()
	}
	for _, p := range ps {
		if got := accountOf(p); got != "acme" {
			t.Fatalf("before: %s", got)
		}
	}
	for i, p := range ps {
		switch i % 3 {
		case 0:
			must(t, e.Bind(p, "globex"))
		case 1:
			e.Unbind(p)
		}
	}
	for i, p := range ps {
		want := []AccountID{"globex", AccountID("denied: " + DenyUnknownPrincipal.String()), "acme"}[i%3]
		if got := accountOf(p); got != want {
			t.Fatalf("principal %d: %s, want %s", i, got, want)
		}
	}
}
