// Package await is the one place tests wait for something that happens on
// another goroutine, thread or process: they state the condition, not a
// duration. A test that needs "after X, Y holds" polls for Y with True; a
// test that needs "Y never happens" states what must happen first and
// checks Y then, instead of sleeping and hoping.
//
// The bound is a failure detector, not a latency assertion: it is long
// (Default) so that a busy two-CPU machine passes, and latency bounds live
// in benchmarks. The pause between polls grows from 1 ms to 50 ms, so a
// condition that holds at once costs nothing and one that takes seconds
// costs little CPU.
package await

import (
	"testing"
	"time"
)

// Default bounds a wait when the caller names none: far beyond anything
// the daemon needs on a quiet machine, so that reaching it means "never".
const Default = 60 * time.Second

// Poll reports whether cond became true within d, polling it with a
// growing pause. It is for tests that want to act on a timeout themselves.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// True waits until cond holds, failing tb (naming what it waited for)
// after Default.
func True(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Within(tb, Default, what, cond)
}

// Within waits until cond holds, failing tb after d.
func Within(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Poll(d, cond) {
		tb.Fatalf("waited %v for %s", d, what)
	}
}

// Value polls f until it returns ok, failing tb after Default, and returns
// the value it returned then.
func Value[T any](tb testing.TB, what string, f func() (T, bool)) T {
	tb.Helper()
	var v T
	True(tb, what, func() bool {
		var ok bool
		v, ok = f()
		return ok
	})
	return v
}
