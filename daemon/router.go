//go:build linux

package daemon

import (
	"math"
	"runtime"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
)

// router carries the effects that run against the construction order: the
// spool (opened before the plane) wakes the plane and the exporter when
// usage is durable; the exporter (made before the plane, for recovery)
// asks the plane's floor and tells the provisioner of funding it moved;
// the plane tells the provisioner of funding and key use; the fleet's
// announcements reach the plane. Open makes the router first, hands its
// methods to each part as the part is made, and sets each target as soon
// as it exists.
//
// Invariant: a target is set before any goroutine that could read it
// starts. Before the plane runs (node.StartPlane, after every target is
// set) the only caller is recovery: its exports run on Open's goroutine,
// and the spool calls durable for recovery's records before Sync returns
// them to Open. So the fields need no lock, and the nil targets recovery
// meets are the ones it had: no plane, no provisioner.
type router struct {
	noted    *notedSpool
	exporter *control.Exporter
	plane    *control.Plane
	prov     *control.Provisioner
}

// durable is the spool's OnDurable: it notes the mark and wakes both of
// its readers (see notedSpool).
func (r *router) durable(seq uint64) {
	r.noted.note(seq)
	if r.plane != nil {
		r.plane.Kick()
	}
	if r.exporter != nil {
		r.exporter.WakeAt(seq)
	}
	// Let the plane run now, on this thread: woken from here it waits in
	// this goroutine's run queue, and the flusher's next fdatasync would
	// leave it there, a blocked syscall with work queued behind it, which
	// the Go scheduler's monitor polls for every 20 µs. Measured: the
	// monitor's share of the CPU under durable checks fell from 4.9–6.4%
	// to 2.9–3.3% (BENCHMARKS.md).
	runtime.Gosched()
}

// floor is the exporter's Floor: the plane's oldest open commit entry
// must stay in the spool. Without a plane (recovery) nothing is open.
func (r *router) floor() uint64 {
	if r.plane == nil {
		return math.MaxUint64
	}
	return r.plane.Floor()
}

// usageChanged is the exporter's Changed and the plane's FundingChanged.
// Without a provisioner (recovery) nothing is published yet: Load reads
// the funding recovery moved.
func (r *router) usageChanged(ids []core.AccountID) {
	if r.prov != nil {
		r.prov.UsageChanged(ids)
	}
}

// keysUsed is the plane's KeysUsed: only the running plane calls it.
func (r *router) keysUsed(keys []plane.KeyUsed) { r.prov.KeysUsed(keys) }

// Heard hands another node's announcement to the plane (fleet.Hearer):
// only the fleet's follower calls it, which starts after the plane.
func (r *router) Heard(a plane.Announcement) { r.plane.Heard(a) }
