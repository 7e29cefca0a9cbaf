//go:build !linux

package affinity

import (
	"fmt"
	"runtime"
)

// Supported reports whether Pin binds threads to CPUs on this platform.
func Supported() bool {
	return false
}

// Allowed returns 0 through runtime.NumCPU()-1: without an affinity API the
// CPUs the process may use are not visible, only how many there are.
func Allowed() ([]int, error) {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus, nil
}

// Pin locks the calling goroutine to its OS thread but cannot bind it, and
// returns ErrUnsupported with the thread locked, so that a shard still owns
// its thread. A cpu outside Allowed is rejected first, without locking.
func Pin(cpu int) error {
	if cpu < 0 || cpu >= runtime.NumCPU() {
		return fmt.Errorf("%w: CPU %d", ErrNotAllowed, cpu)
	}
	runtime.LockOSThread()
	return ErrUnsupported
}

// Unpin undoes one Pin's lock.
func Unpin() error {
	runtime.UnlockOSThread()
	return nil
}
