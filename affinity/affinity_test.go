package affinity

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"
)

func mustAllowed(t *testing.T) []int {
	t.Helper()
	cpus, err := Allowed()
	if err != nil {
		t.Fatalf("Allowed: %v", err)
	}
	return cpus
}

func TestAllowed(t *testing.T) {
	cpus := mustAllowed(t)
	if len(cpus) == 0 {
		t.Fatal("Allowed is empty")
	}
	if len(cpus) > runtime.NumCPU() {
		// NumCPU counts the same mask at start; it can only have shrunk.
		t.Errorf("Allowed has %d CPUs, NumCPU is %d", len(cpus), runtime.NumCPU())
	}
	for i, cpu := range cpus {
		if cpu < 0 || cpu >= MaxCPU {
			t.Errorf("CPU %d out of range", cpu)
		}
		if i > 0 && cpu <= cpus[i-1] {
			t.Errorf("Allowed not strictly increasing: %v", cpus)
		}
	}
	t.Logf("allowed CPUs %v, NumCPU %d, pinning supported %v", cpus, runtime.NumCPU(), Supported())
}

// firstDisallowed returns the lowest CPU id below MaxCPU that is not allowed.
func firstDisallowed(cpus []int) int {
	for id := range MaxCPU {
		if !slices.Contains(cpus, id) {
			return id
		}
	}
	return -1
}

func TestPinDisallowed(t *testing.T) {
	cpus := mustAllowed(t)
	bad := []int{-1, MaxCPU, MaxCPU + 1, math.MaxInt}
	if id := firstDisallowed(cpus); id >= 0 {
		bad = append(bad, id)
	}
	for _, cpu := range bad {
		errc := make(chan error)
		go func() { errc <- Pin(cpu) }()
		if err := <-errc; !errors.Is(err, ErrNotAllowed) {
			t.Errorf("Pin(%d) = %v, want ErrNotAllowed", cpu, err)
		}
	}
}
