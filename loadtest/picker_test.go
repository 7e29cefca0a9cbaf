package loadtest

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPickerUniform(t *testing.T) {
	p, err := NewPicker(10, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var counts [10]int
	const draws = 100000
	for range draws {
		counts[p.Pick(r)]++
	}
	for i, c := range counts {
		// Expected 10000 each; 5 standard deviations is about 475.
		if math.Abs(float64(c)-draws/10) > 500 {
			t.Errorf("index %d drawn %d times, want about %d", i, c, draws/10)
		}
	}
}

func TestPickerZipfSkews(t *testing.T) {
	const n = 100
	const s = 1.0
	p, err := NewPicker(n, s)
	if err != nil {
		t.Fatal(err)
	}
	// Harmonic number H_100 = 5.18738; rank 1 gets 1/H of the traffic.
	h := 0.0
	for i := 1; i <= n; i++ {
		h += 1 / float64(i)
	}
	if got, want := p.Share(0), 1/h; math.Abs(got-want) > 1e-9 {
		t.Fatalf("share of rank 1 = %v, want %v", got, want)
	}

	r := rand.New(rand.NewPCG(7, 7))
	counts := make([]int, n)
	const draws = 200000
	for range draws {
		counts[p.Pick(r)]++
	}
	for _, i := range []int{0, 1, 2, 9, 49, 99} {
		want := draws / (h * float64(i+1))
		sd := math.Sqrt(want)
		if math.Abs(float64(counts[i])-want) > 5*sd+1 {
			t.Errorf("rank %d drawn %d times, want about %.0f", i+1, counts[i], want)
		}
	}
	// The skew itself: rank 1 about twice rank 2 and ten times rank 10.
	if r := float64(counts[0]) / float64(counts[1]); r < 1.85 || r > 2.15 {
		t.Errorf("rank1/rank2 = %.3f, want about 2", r)
	}
	if r := float64(counts[0]) / float64(counts[9]); r < 9 || r > 11 {
		t.Errorf("rank1/rank10 = %.3f, want about 10", r)
	}
	// Top 10% of accounts carry H_10/H_100 = 56.5% of the draws.
	top := 0
	for _, c := range counts[:10] {
		top += c
	}
	if f := float64(top) / draws; f < 0.55 || f > 0.58 {
		t.Errorf("top 10 accounts got %.3f of draws, want about 0.565", f)
	}
}

func TestPickerRejectsBadInput(t *testing.T) {
	if _, err := NewPicker(0, 0); err == nil {
		t.Error("n=0 accepted")
	}
	if _, err := NewPicker(10, -1); err == nil {
		t.Error("negative exponent accepted")
	}
	if _, err := NewPicker(10, math.NaN()); err == nil {
		t.Error("NaN exponent accepted")
	}
}

func TestPickerStaysInRange(t *testing.T) {
	p, _ := NewPicker(3, 2.5)
	r := rand.New(rand.NewPCG(3, 3))
	for range 10000 {
		if i := p.Pick(r); i < 0 || i >= 3 {
			t.Fatalf("picked %d", i)
		}
	}
}
