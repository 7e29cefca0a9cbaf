package core

import (
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

func TestCostUnitsEdges(t *testing.T) {
	if _, err := MaxCostUnits.Add(1); err != ErrCostOverflow {
		t.Fatalf("Max+1: err = %v", err)
	}
	if v, err := MaxCostUnits.Add(0); err != nil || v != MaxCostUnits {
		t.Fatalf("Max+0 = %d, %v", v, err)
	}
	if _, err := CostUnits(0).Sub(1); err != ErrCostUnderflow {
		t.Fatalf("0-1: err = %v", err)
	}
	if _, err := CostUnits(1 << 32).Mul(1 << 32); err != ErrCostOverflow {
		t.Fatalf("2^32*2^32: err = %v", err)
	}
	if v, err := CostUnits(1 << 31).Mul(1 << 32); err != nil || v != 1<<63 {
		t.Fatalf("2^31*2^32 = %d, %v", v, err)
	}
}

// TestCostUnitsMatchBigIntegers checks every operation against an
// arbitrary-precision oracle: the result is exact when it fits and an error
// exactly when it does not.
func TestCostUnitsMatchBigIntegers(t *testing.T) {
	limit := new(big.Int).SetUint64(uint64(MaxCostUnits))
	rapid.Check(t, func(t *rapid.T) {
		a := CostUnits(rapid.Uint64().Draw(t, "a"))
		b := rapid.Uint64().Draw(t, "b")
		ba, bb := new(big.Int).SetUint64(uint64(a)), new(big.Int).SetUint64(b)
		check := func(op string, got CostUnits, err error, want *big.Int) {
			fits := want.Sign() >= 0 && want.Cmp(limit) <= 0
			if fits != (err == nil) {
				t.Fatalf("%s(%d, %d): err = %v, exact = %s", op, a, b, err, want)
			}
			if fits && uint64(got) != want.Uint64() {
				t.Fatalf("%s(%d, %d) = %d, want %s", op, a, b, got, want)
			}
		}
		s, err := a.Add(CostUnits(b))
		check("add", s, err, new(big.Int).Add(ba, bb))
		d, err := a.Sub(CostUnits(b))
		check("sub", d, err, new(big.Int).Sub(ba, bb))
		m, err := a.Mul(b)
		check("mul", m, err, new(big.Int).Mul(ba, bb))
	})
}
