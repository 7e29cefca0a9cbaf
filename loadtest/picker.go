package loadtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Picker chooses account indexes in [0, n): uniformly, or Zipf-skewed so
// that index 0 is the hottest account.
//
// The Zipf case keeps a cumulative table of n float64 weights and picks by
// binary search. That is exact for every exponent s > 0 (math/rand's Zipf
// needs s > 1, and the interesting skews for account traffic are around 1)
// and costs 8 bytes per account, which is fine for the million-account runs
// tollgated's targets talk about. A Picker is read-only after construction
// and can be shared; the randomness comes from the caller.
type Picker struct {
	n   int
	cdf []float64 // nil for uniform
}

// NewPicker returns a picker over n accounts. s == 0 means uniform; s > 0
// weights account i (0-based) by 1/(i+1)^s.
func NewPicker(n int, s float64) (*Picker, error) {
	if n <= 0 {
		return nil, fmt.Errorf("need at least one account, got %d", n)
	}
	if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return nil, fmt.Errorf("zipf exponent must be >= 0, got %v", s)
	}
	p := &Picker{n: n}
	if s == 0 || n == 1 {
		return p, nil
	}
	p.cdf = make([]float64, n)
	sum := 0.0
	for i := range p.cdf {
		sum += math.Pow(float64(i+1), -s)
		p.cdf[i] = sum
	}
	for i := range p.cdf {
		p.cdf[i] /= sum
	}
	p.cdf[n-1] = 1 // guard against rounding leaving the last bucket short
	return p, nil
}

// N returns the number of accounts.
func (p *Picker) N() int { return p.n }

// Pick returns an account index drawn with r.
func (p *Picker) Pick(r *rand.Rand) int {
	if p.cdf == nil {
		return r.IntN(p.n)
	}
	u := r.Float64()
	return sort.SearchFloat64s(p.cdf, u) // first i with cdf[i] >= u
}

// Share returns the probability of index i, for reports and tests.
func (p *Picker) Share(i int) float64 {
	if i < 0 || i >= p.n {
		return 0
	}
	if p.cdf == nil {
		return 1 / float64(p.n)
	}
	if i == 0 {
		return p.cdf[0]
	}
	return p.cdf[i] - p.cdf[i-1]
}
