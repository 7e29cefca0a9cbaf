// Package invariant makes broken invariants loud. A component that finds
// one of its invariants broken — a usage event with no ring room although
// room was reserved, units returned that were never sliced, a lease whose
// books do not balance — calls Violated. In a running daemon that counts
// the violation by kind (exported as tollgated_invariant_violations_total)
// and logs it once per occurrence; built with the `invariants` tag (as
// `make test` builds every test binary) it panics, so a test that reaches a
// broken invariant fails where it broke instead of passing with a silent
// counter. The tag, not the testing package, decides: the daemon never
// links `testing`, and a test binary built without the tag behaves as the
// daemon does.
//
// Kinds are a fixed, append-only list, so counting is one atomic add into
// an array: no map, no lock, no allocation, safe from any goroutine
// including a shard's pinned thread.
package invariant

import (
	"fmt"
	"sync/atomic"
)

// Kind names one invariant. Values only append; never renumber.
type Kind uint8

const (
	LostUsage            Kind = iota // a billed event found no ring room although room was reserved
	AckOversize                      // a parked answer was larger than its slot
	InstallRefused                   // a shard refused a snapshot the plane sent
	GrantRefused                     // a shard could not apply a grant (the units were handed back)
	UnknownReturn                    // units returned for a lease the plane never sliced them from
	UnknownSettle                    // usage settled against a lease the plane does not hold
	LeaseBooks                       // a node lease's granted != pool + out + spent
	SliceBooks                       // a shard lease slot's granted != available + held + billed + returned
	LedgerRefusedRelease             // the ledger refused a release the plane believed exact
	SpoolBroken                      // the spool failed a write or sync: nothing more becomes durable
	RecoveryMismatch                 // same-node recovery found a lease it cannot account for
	ShareSum                         // shares of a limit summed past the limit
	UnknownKind                      // a switch over a message, effect or call kind met one it does not know
	numKinds
)

var names = [numKinds]string{
	LostUsage:            "lost_usage",
	AckOversize:          "ack_oversize",
	InstallRefused:       "install_refused",
	GrantRefused:         "grant_refused",
	UnknownReturn:        "unknown_return",
	UnknownSettle:        "unknown_settle",
	LeaseBooks:           "lease_books",
	SliceBooks:           "slice_books",
	LedgerRefusedRelease: "ledger_refused_release",
	SpoolBroken:          "spool_broken",
	RecoveryMismatch:     "recovery_mismatch",
	ShareSum:             "share_sum",
	UnknownKind:          "unknown_kind",
}

func (k Kind) String() string {
	if k < numKinds {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Kinds lists every kind, for exporters that want a zero for each.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

var (
	counts [numKinds]atomic.Uint64
	// report, if set, hears every violation (the daemon logs it). It is
	// set once at start-up, before any shard runs.
	report atomic.Pointer[func(Kind, string)]
	// panics is Panics (the build tag) unless a test asks to count instead.
	panics atomic.Bool
)

func init() { panics.Store(Panics) }

// Violated records that invariant k is broken; detail says how. Built with
// the `invariants` tag it panics (see CountInTests).
func Violated(k Kind, detail string) {
	if k >= numKinds {
		k = numKinds - 1
	}
	counts[k].Add(1)
	if panics.Load() {
		panic("invariant violated: " + k.String() + ": " + detail)
	}
	if f := report.Load(); f != nil {
		(*f)(k, detail)
	}
}

// Count reports how many times k was violated since the process started.
func Count(k Kind) uint64 {
	if k >= numKinds {
		return 0
	}
	return counts[k].Load()
}

// OnViolation sets the function every violation is reported to (the
// daemon's error log). Call it before the components that can violate
// anything start.
func OnViolation(f func(k Kind, detail string)) { report.Store(&f) }

// CountInTests makes Violated count (and report) instead of panicking, for
// tests that break an invariant on purpose to see it counted. The returned
// function restores panicking.
func CountInTests() (restore func()) {
	panics.Store(false)
	return func() { panics.Store(Panics) }
}
