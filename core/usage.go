package core

// UsageSource says what funded a billed request.
type UsageSource uint8

const (
	SourceLease   UsageSource = iota // a lease, named by FencingToken
	SourceOverage                    // elastic overage, no lease
)

// UsageEvent is the bill for one committed request. Exactly one is emitted
// per committed reservation: by Finish, or by Expire at its deadline.
type UsageEvent struct {
	RequestID    RequestID
	Principal    Principal
	Units        CostUnits // billed, ≤ Quote
	Quote        CostUnits
	Source       UsageSource
	FencingToken uint64
	OccurredAt   int64 // Unix ns: finish time, or the deadline for a lapsed one
	// Policy is the snapshot the request was admitted under: it names the
	// account, the generation and the policy revision. It is immutable, and
	// a pointer, so billing never reads it on the engine's thread (with a
	// million accounts that read would be a cache miss per request); the
	// event's consumers read it where they write the bill.
	Policy *Snapshot
	// Lapsed is true for a reservation billed at its quote because it was
	// never finished before its deadline.
	Lapsed bool
}

// Account is the billed account.
func (ev *UsageEvent) Account() AccountID { return ev.Policy.Account }

// Generation is the generation of the policy the request was judged by.
func (ev *UsageEvent) Generation() uint64 { return ev.Policy.Generation }

// Revision is that policy's opaque revision.
func (ev *UsageEvent) Revision() *PolicyRevision { return &ev.Policy.Revision }

// UsageSlot is capacity reserved in advance for exactly one usage event.
// Obtaining one is the backpressure decision (before reading the body);
// the engine then calls exactly one of its methods, exactly once: Record
// when the request is billed, Release when it ends without a charge.
// Record must not fail or block: the capacity was reserved for it. The
// event is valid only during the call: copy what you keep.
type UsageSlot interface {
	Record(*UsageEvent)
	Release()
}

// DiscardUsage is a stand-in usage sink that drops every event and counts
// what it dropped. It exists for adopting the engine in stages; counting
// keeps "usage is not wired up" distinguishable from "nothing was used".
// It is not for billing. Use it from one goroutine, like the engine.
type DiscardUsage struct {
	Discarded      uint64
	DiscardedUnits CostUnits
	Released       uint64
}

// Slot returns a UsageSlot backed by d. It allocates nothing.
func (d *DiscardUsage) Slot() UsageSlot { return d }

// Record counts and drops ev.
func (d *DiscardUsage) Record(ev *UsageEvent) {
	d.Discarded++
	d.DiscardedUnits = mustAdd(d.DiscardedUnits, ev.Units)
}

// Release counts a slot that ended with no charge.
func (d *DiscardUsage) Release() { d.Released++ }
