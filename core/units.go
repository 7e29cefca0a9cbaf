package core

import (
	"errors"
	"math/bits"
)

// CostUnits is an exact, non-negative amount of money-like units. All
// arithmetic on it is checked: an operation that would wrap is an error.
type CostUnits uint64

// MaxCostUnits is the largest representable amount.
const MaxCostUnits = CostUnits(^uint64(0))

// ErrCostOverflow reports an addition or multiplication that would exceed
// MaxCostUnits; ErrCostUnderflow a subtraction that would go below zero.
var (
	ErrCostOverflow  = errors.New("core: cost units overflow")
	ErrCostUnderflow = errors.New("core: cost units underflow")
)

// Add returns a+b, or ErrCostOverflow.
func (a CostUnits) Add(b CostUnits) (CostUnits, error) {
	s, carry := bits.Add64(uint64(a), uint64(b), 0)
	if carry != 0 {
		return 0, ErrCostOverflow
	}
	return CostUnits(s), nil
}

// Sub returns a-b, or ErrCostUnderflow.
func (a CostUnits) Sub(b CostUnits) (CostUnits, error) {
	d, borrow := bits.Sub64(uint64(a), uint64(b), 0)
	if borrow != 0 {
		return 0, ErrCostUnderflow
	}
	return CostUnits(d), nil
}

// Mul returns a*n, or ErrCostOverflow.
func (a CostUnits) Mul(n uint64) (CostUnits, error) {
	hi, lo := bits.Mul64(uint64(a), n)
	if hi != 0 {
		return 0, ErrCostOverflow
	}
	return CostUnits(lo), nil
}

// mustAdd and mustSub are for sums whose bound an invariant already
// guarantees (for example, refunding a quote into the lease it came from).
// A failure there is a broken invariant, not bad input, so it panics. They
// are small enough to inline; the panic lives out of line.
func mustAdd(a, b CostUnits) CostUnits {
	s := a + b
	if s < a {
		brokenInvariant(ErrCostOverflow)
	}
	return s
}

func mustSub(a, b CostUnits) CostUnits {
	if b > a {
		brokenInvariant(ErrCostUnderflow)
	}
	return a - b
}

//go:noinline
func brokenInvariant(err error) {
	panic("core: invariant broken: " + err.Error())
}
