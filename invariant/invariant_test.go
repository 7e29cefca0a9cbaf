package invariant

import "testing"

func TestViolationsPanicInTests(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Violated did not panic in a test binary")
		}
	}()
	Violated(LeaseBooks, "test")
}

func TestCountInTestsCountsAndReports(t *testing.T) {
	restore := CountInTests()
	defer restore()
	var got []Kind
	OnViolation(func(k Kind, _ string) { got = append(got, k) })
	defer OnViolation(func(Kind, string) {})
	before := Count(UnknownReturn)
	Violated(UnknownReturn, "units from nowhere")
	if Count(UnknownReturn) != before+1 || len(got) != 1 || got[0] != UnknownReturn {
		t.Fatalf("count %d → %d, reported %v", before, Count(UnknownReturn), got)
	}
}

func TestEveryKindHasAName(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		n := k.String()
		if n == "" || seen[n] {
			t.Fatalf("kind %d has name %q (empty or repeated)", k, n)
		}
		seen[n] = true
	}
}
