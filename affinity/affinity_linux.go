//go:build linux

package affinity

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Supported reports whether Pin binds threads to CPUs on this platform.
func Supported() bool {
	return true
}

// Allowed returns the CPUs this process may run on, sorted: its affinity
// mask, which the kernel has already narrowed by taskset and the cgroup
// cpuset. It is the same from every goroutine, pinned or not.
func Allowed() ([]int, error) {
	set, err := processMask()
	if err != nil {
		return nil, err
	}
	return cpusOf(set), nil
}

// cpusOf lists the CPUs in set, sorted.
func cpusOf(set unix.CPUSetDynamic) []int {
	var cpus []int
	for cpu := range MaxCPU {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// Pin locks the calling goroutine to its OS thread and binds that thread to
// cpu alone. cpu must be in Allowed.
//
// On error the thread is left as it was and unlocked: the only failures are
// a CPU outside the allowed set, which is checked before anything changes,
// and sched_setaffinity itself, which changes nothing when it fails.
//
// Pin nests like runtime.LockOSThread: calling it again on a pinned thread
// moves the thread to the new CPU and adds a lock that another Unpin undoes.
func Pin(cpu int) error {
	if cpu < 0 || cpu >= MaxCPU {
		return fmt.Errorf("%w: CPU %d is out of range [0, %d)", ErrNotAllowed, cpu, MaxCPU)
	}
	allowed, err := processMask()
	if err != nil {
		return err
	}
	if !allowed.IsSet(cpu) {
		return fmt.Errorf("%w: CPU %d", ErrNotAllowed, cpu)
	}
	// Lock before changing the mask, so that the goroutine cannot move to
	// another thread between the two and the mask is never applied to a
	// thread the scheduler would hand to other goroutines.
	runtime.LockOSThread()
	set := unix.NewCPUSet(MaxCPU)
	set.Set(cpu)
	if err := unix.SchedSetaffinityDynamic(0, set); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("affinity: sched_setaffinity(CPU %d): %w", cpu, err)
	}
	return nil
}

// Unpin gives the calling thread back the process mask and undoes one Pin's
// lock. If the mask cannot be restored the thread stays locked, so that it
// dies with its goroutine instead of running others on one CPU, and the error
// is returned.
func Unpin() error {
	set, err := processMask()
	if err == nil {
		err = unix.SchedSetaffinityDynamic(0, set)
	}
	if err != nil {
		return fmt.Errorf("affinity: restoring the process mask: %w", err)
	}
	runtime.UnlockOSThread()
	return nil
}

// processMask returns the process's affinity mask, which is the mask of
// every thread this package has not pinned (see the package comment).
//
// It reads it from a new goroutine, not the caller's: that goroutine cannot
// run on a locked thread, so it sees the process mask even when the caller's
// own thread is pinned, and it reads the kernel's current value, which
// follows cpuset changes made after start.
func processMask() (unix.CPUSetDynamic, error) {
	set := unix.NewCPUSet(MaxCPU)
	done := make(chan error, 1)
	go func() {
		done <- unix.SchedGetaffinityDynamic(0, set)
	}()
	if err := <-done; err != nil {
		// EINVAL here means the kernel supports more than MaxCPU CPUs.
		return nil, fmt.Errorf("affinity: sched_getaffinity: %w", err)
	}
	return set, nil
}
