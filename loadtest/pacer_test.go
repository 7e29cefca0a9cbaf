package loadtest

import (
	"slices"
	"testing"
	"time"
)

func TestScheduleHasNoDrift(t *testing.T) {
	r := &run{interval: 1e9 / 3000.0} // an interval that is not a whole ns
	if got := r.at(3000); got != int64(time.Second) {
		t.Errorf("send 3000 due at %d, want exactly 1s", got)
	}
	if got := r.at(3_000_000); got != int64(1000*time.Second) {
		t.Errorf("send 3e6 due at %d", got)
	}
	for k := int64(1); k < 10000; k++ {
		if r.at(k) < r.at(k-1) {
			t.Fatalf("schedule goes backwards at %d", k)
		}
	}
}

func TestSleeperSleepsAtLeast(t *testing.T) {
	s := newSleeper()
	defer s.close()
	for _, d := range []time.Duration{50 * time.Microsecond, 2 * time.Millisecond} {
		start := time.Now()
		s.sleep(d)
		if el := time.Since(start); el < d {
			t.Errorf("slept %v, asked %v", el, d)
		}
	}
	s.sleep(0)
	s.sleep(-time.Second)
}

// TestSleeperBeatsTimerGranularity checks the reason the sleeper exists: in
// an idle process, a 200 µs sleep on the runtime's timer takes about a
// millisecond on Linux; the sleeper should wake within a fraction of that.
// The best of three attempts is taken, since the machine is shared.
func TestSleeperBeatsTimerGranularity(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	const d = 200 * time.Microsecond
	s := newSleeper()
	defer s.close()
	best := time.Hour
	for range 3 {
		var over []time.Duration
		for range 40 {
			start := time.Now()
			s.sleep(d)
			over = append(over, time.Since(start)-d)
		}
		slices.Sort(over)
		best = min(best, over[len(over)/2])
	}
	if best > 600*time.Microsecond {
		t.Errorf("median overshoot %v for a %v sleep", best, d)
	}
}
