package invariant

import "testing"

// TestViolationsPanicOnlyWithTheTag: built with `-tags invariants` (make
// test) a violation panics; built without (the daemon) it is counted.
func TestViolationsPanicOnlyWithTheTag(t *testing.T) {
	before := Count(LeaseBooks)
	defer func() {
		r := recover()
		switch {
		case Panics && r == nil:
			t.Fatal("built with the invariants tag, Violated did not panic")
		case !Panics && r != nil:
			t.Fatalf("built without the invariants tag, Violated panicked: %v", r)
		case Count(LeaseBooks) != before+1:
			t.Fatalf("count %d → %d, want one more", before, Count(LeaseBooks))
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
