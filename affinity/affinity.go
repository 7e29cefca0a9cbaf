// Package affinity pins the calling goroutine's OS thread to one CPU.
//
// A shard runs its event loop on a goroutine locked to its OS thread
// (runtime.LockOSThread) and that thread is bound to a single CPU, so its
// caches, its account table and its listener's packets stay on one core.
//
// Pinning is per thread. A goroutine that calls Pin owns a pinned thread until
// it calls Unpin; if it exits while still pinned, the Go runtime destroys the
// thread instead of reusing it, so a pinned thread never leaks into the
// scheduler's pool. New threads inherit the process mask, not a pinned one:
// when a locked thread needs a new one, the runtime has its template thread,
// which is never locked, clone it instead. Every thread not pinned here
// therefore carries the process mask, which is what Allowed reads and what
// Unpin restores.
//
// On Linux the masks come from sched_getaffinity(2), which already reflects
// taskset and the cgroup cpuset. Elsewhere the package builds, Supported
// reports false, and Pin locks the thread and returns ErrUnsupported.
package affinity

import (
	"errors"
	"fmt"
	"runtime"
)

// MaxCPU bounds the CPU ids this package handles: ids are in [0, MaxCPU).
// It is the kernel's largest common NR_CPUS and keeps a mistyped --cpus list
// from asking for an enormous mask.
const MaxCPU = 4096

var (
	// ErrUnsupported is returned by Pin where the platform cannot bind a
	// thread to a CPU. The thread is still locked, so the shard runs
	// unpinned but otherwise as designed; report it once at start.
	ErrUnsupported = fmt.Errorf("affinity: CPU pinning is not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)

	// ErrNotAllowed is returned (wrapped) by Pin for a CPU outside Allowed.
	ErrNotAllowed = errors.New("affinity: CPU not in the allowed set")
)
