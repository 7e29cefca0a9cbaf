package core

import (
	"errors"
	"sync/atomic"
)

// cas is the one compare-and-swap that decides commit against cancel.
func cas(phase *uint32, from, to uint32) bool {
	return atomic.CompareAndSwapUint32(phase, from, to)
}

// Reservation is a handle to an admitted request. It names a slot in its
// engine's reservation table and that slot's generation, so a handle kept
// after its reservation ended is recognised as stale, never confused with
// the slot's next occupant.
type Reservation struct {
	idx uint32
	gen uint32
}

// ID packs the handle into 64 bits for the wire.
func (r Reservation) ID() uint64 { return uint64(r.gen)<<32 | uint64(r.idx) }

// ReservationFromID is the inverse of ID.
func ReservationFromID(id uint64) Reservation {
	return Reservation{idx: uint32(id), gen: uint32(id >> 32)}
}

// Errors for operations on a reservation in the wrong stage.
var (
	ErrUnknownReservation = errors.New("core: unknown or ended reservation")
	ErrNotReady           = errors.New("core: reservation has not passed the capacity gate")
	ErrNotCommitted       = errors.New("core: reservation is not committed")
	ErrAlreadyCommitted   = errors.New("core: reservation already committed; finish it")
	ErrCancelled          = errors.New("core: reservation was cancelled")
	ErrBilledAboveQuote   = errors.New("core: billed units exceed the quote")
)

// RefusalError is a stage refusal reported as an error: the request must not
// run, and Reason says why. The two below are the only ones; they are
// preallocated, so refusing allocates nothing.
type RefusalError struct{ Reason DenyReason }

func (e *RefusalError) Error() string { return "core: refused: " + e.Reason.Label() }

var (
	// ErrCapacityUnavailable: the capacity gate shed the reservation.
	ErrCapacityUnavailable error = &RefusalError{Reason: DenyCapacityUnavailable}
	// ErrFundingExpiredAtStart: funding lapsed between admission and start.
	ErrFundingExpiredAtStart error = &RefusalError{Reason: DenyFundingExpiredAtStart}
)

// ReasonOf returns the deny reason an error carries, or DenyNone.
func ReasonOf(err error) DenyReason {
	// The engine returns its refusals unwrapped: look at those, and at a
	// nil error, first. errors.As takes its target's address, which puts
	// the target on the heap each time that line runs (the staged routes
	// call this for every commit, finish and cancel).
	if re, ok := err.(*RefusalError); ok {
		return re.Reason
	}
	if err == nil {
		return DenyNone
	}
	var re *RefusalError
	if errors.As(err, &re) {
		return re.Reason
	}
	return DenyNone
}

// Phases of a reservation slot. Commit (ready → committed) and cancel
// (pending or ready → closing) are each one compare-and-swap on the phase
// word, so of a commit and a cancel exactly one wins, even when they come
// from two goroutines of an embedder. Transitions only the owner can make
// (admit, capacity, finish, expiry) are plain stores: every caller of an
// Engine is its owner or holds Concurrent's stripe lock, and a locked
// instruction there would cost more than the rest of the stage.
const (
	phaseFree uint32 = iota
	phasePending
	phaseReady
	phaseCommitted
	phaseClosing
)

type resSlot struct {
	phase uint32
	gen   uint32
	pos   uint32 // index in the live list

	capture Capture // who ends it, and what it bills unfinished (capture.go)

	acct      *account
	prin      *principalEntry
	pol       *policy
	quote     CostUnits
	token     uint64 // funding lease; 0 = overage
	fundedTil int64  // funding usable until (Unix ns); commit must be before it
	deadline  int64
	admitted  int64
	permit    permit
	usage     UsageSlot
	request   RequestID
}

// resTable is a fixed-capacity slab of reservation slots with a free stack
// and a dense list of live slots for the deadline sweep.
type resTable struct {
	slots []resSlot
	free  []uint32
	live  []uint32
}

func newResTable(capacity int) resTable {
	t := resTable{
		slots: make([]resSlot, capacity),
		free:  make([]uint32, capacity),
		live:  make([]uint32, 0, capacity),
	}
	for i := range t.free {
		t.free[i] = uint32(capacity - 1 - i)
	}
	return t
}

func (t *resTable) alloc() (uint32, *resSlot, bool) {
	n := len(t.free)
	if n == 0 {
		return 0, nil, false
	}
	idx := t.free[n-1]
	t.free = t.free[:n-1]
	s := &t.slots[idx]
	s.pos = uint32(len(t.live))
	t.live = append(t.live, idx)
	return idx, s, true
}

// release returns a slot to the free stack and bumps its generation so old
// handles go stale.
func (t *resTable) release(idx uint32) {
	s := &t.slots[idx]
	last := t.live[len(t.live)-1]
	t.live[s.pos] = last
	t.slots[last].pos = s.pos
	t.live = t.live[:len(t.live)-1]
	s.gen++
	s.acct, s.prin, s.pol, s.usage = nil, nil, nil, nil
	s.phase = phaseFree
	t.free = append(t.free, idx)
}

// lookup returns the slot r names if it is still r's.
func (t *resTable) lookup(r Reservation) *resSlot {
	if int(r.idx) >= len(t.slots) {
		return nil
	}
	s := &t.slots[r.idx]
	if s.gen != r.gen || s.phase == phaseFree {
		return nil
	}
	return s
}
