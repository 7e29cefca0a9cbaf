package await

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestPollReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	if !Poll(Default, func() bool { return n.Load() == 3 }) {
		t.Fatal("Poll gave up on a condition that came true")
	}
}

func TestPollGivesUpAtItsBound(t *testing.T) {
	start := time.Now()
	if Poll(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("Poll gave up after %v, before its 20ms bound", waited)
	}
}

func TestValueReturnsWhatTheLastPollSaw(t *testing.T) {
	calls := 0
	got := Value(t, "the third call", func() (int, bool) { calls++; return calls, calls == 3 })
	if got != 3 {
		t.Fatalf("Value = %d, want 3", got)
	}
}
