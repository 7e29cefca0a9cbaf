package core

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPrincipalTableMatchesMap runs random puts, gets and removes against a
// Go map as the oracle, including adversarial keys that collide in the mix.
func TestPrincipalTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab principalTable
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
