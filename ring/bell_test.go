package ring

import (
	"errors"
	"testing"
	"time"
)

func openBell(t *testing.T) *bell {
	t.Helper()
	b := new(bell)
	if err := b.open(); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.close() })
	return b
}

func TestBellRingDrain(t *testing.T) {
	b := openBell(t)
	if b.wait(0) {
		t.Fatal("fresh bell is readable")
	}
	// Several rings before a drain collapse into one wake-up.
	for range 3 {
		b.ring()
	}
	if !b.wait(time.Second) {
		t.Fatal("rung bell is not readable")
	}
	b.drain()
	if b.wait(0) {
		t.Fatal("bell still readable after drain")
	}
	b.drain() // draining a clear bell must not block or fail
	b.ring()
	if !b.wait(0) {
		t.Fatal("bell not readable after a second ring")
	}
}

func TestBellWaitTimeout(t *testing.T) {
	b := openBell(t)
	start := time.Now()
	if b.wait(30 * time.Millisecond) {
		t.Fatal("wait on a silent bell reported a ring")
	}
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Fatalf("wait(30ms) returned after %v", d)
	}
}

func TestBellClose(t *testing.T) {
	b := new(bell)
	if err := b.open(); err != nil {
		t.Fatal(err)
	}
	if err := b.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := b.close(); !errors.Is(err, errClosed) {
		t.Fatalf("second close = %v, want errClosed", err)
	}
}
