package core

import (
	"errors"
	"testing"
)

func TestSupersededLeaseSettlesThenReturns(t *testing.T) {
	f := newFixture(t, nil)
	r := f.start(oneReq, t0) // funded by token 1
	must(t, f.e.GrantLease("acme", 2, 500, t0+3600e9, 0))
	l, _ := f.e.Lease("acme")
	if l.Token() != 2 || l.Units() != 500 {
		t.Fatalf("current lease = %d/%d", l.Token(), l.Units())
	}
	if got := l.TakeRetired(nil); len(got) != 0 {
		t.Fatalf("returned a lease still funding a reservation: %+v", got)
	}
	f.e.Finish(r, 2, t0)
	if f.usage.events[0].FencingToken != 1 {
		t.Fatal("bill does not name the lease that funded it")
	}
	got := l.TakeRetired(nil)
	if len(got) != 1 || got[0] != (LeaseReturn{Token: 1, Units: 1_000_000 - 2}) {
		t.Fatalf("retired return = %+v", got)
	}
	f.conserved()
	if b := l.Balance(); b.Granted != 1_000_500 || b.Returned != 999_998 || b.Billed != 2 {
		t.Fatalf("balance = %+v", b)
	}
}

func TestLeaseGrantRefusals(t *testing.T) {
	var s LeaseSlot
	must(t, s.Grant(5, 10, t0, 0))
	if err := s.Grant(4, 10, t0, 0); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("stale fence: %v", err)
	}
	if err := s.Grant(0, 10, t0, 0); err == nil {
		t.Fatal("token 0 accepted")
	}
	if err := s.Grant(5, MaxCostUnits, t0, 0); !errors.Is(err, ErrCostOverflow) {
		t.Fatalf("overflowing grant: %v", err)
	}
	// Fill every retiring place with a lease that still funds a reservation.
	for tok := uint64(6); tok < 6+MaxRetiringLeases; tok++ {
		if r, _ := s.debit(1, t0-1); r != DenyNone {
			t.Fatal(r)
		}
		must(t, s.Grant(tok, 10, t0, 0))
	}
	s.debit(1, t0-1)
	if err := s.Grant(100, 10, t0, 0); !errors.Is(err, ErrRetiringFull) {
		t.Fatalf("retiring overflow: %v", err)
	}
	if !s.Balance().Conserved() {
		t.Fatalf("refused grants broke conservation: %+v", s.Balance())
	}
}

func TestTakeUnspentThenLateSettlement(t *testing.T) {
	f := newFixture(t, nil)
	r := f.start(oneReq, t0)
	l, _ := f.e.Lease("acme")
	if got := l.TakeUnspent(); got.Units != 1_000_000-102 || got.Token != 1 {
		t.Fatalf("unspent = %+v", got)
	}
	f.e.Finish(r, 100, t0)
	if got := l.TakeUnspent(); got.Units != 2 {
		t.Fatalf("late refund not returned: %+v", got)
	}
	f.conserved()
}

// TestRetiredLeaseReturnsItselfOnceIdle: retiring the current lease returns
// its unspent units at once; the reservation it still funds settles into it,
// and the engine then asks (ReturnDue) for the rest to go back.
func TestRetiredLeaseReturnsItselfOnceIdle(t *testing.T) {
	f := newFixture(t, nil)
	r := f.start(oneReq, t0) // funded by token 1: 1,000,000 units
	l, _ := f.e.Lease("acme")
	quote := f.e.Quote(r)
	got := l.Retire(1)
	if got != (LeaseReturn{Token: 1, Units: 1_000_000 - quote}) || l.Token() != 0 || l.ReturnDue() {
		t.Fatalf("retire returned %+v; current token %d, return due %v", got, l.Token(), l.ReturnDue())
	}
	if got := l.Retire(1); got != (LeaseReturn{}) {
		t.Fatalf("retiring a lease that is no longer current returned %+v", got)
	}
	f.e.DrainRefills(nil)
	f.e.Finish(r, 2, t0)
	reqs := f.e.DrainRefills(nil)
	if len(reqs) != 1 || !reqs[0].ReturnDue || !l.ReturnDue() {
		t.Fatalf("after the last settlement: %+v", reqs)
	}
	back := l.TakeRetired(nil)
	if len(back) != 1 || back[0] != (LeaseReturn{Token: 1, Units: quote - 2}) || l.ReturnDue() {
		t.Fatalf("retired return = %+v", back)
	}
	f.conserved()
	if b := l.Balance(); b.Returned != 1_000_000-2 || b.Billed != 2 || b.Available != 0 {
		t.Fatalf("balance = %+v", b)
	}
}

// TestExtendMovesOnlyTheCurrentLease: an extension of the current token
// moves its usable-until forward; another token, or an earlier time, does
// nothing.
func TestExtendMovesOnlyTheCurrentLease(t *testing.T) {
	var s LeaseSlot
	must(t, s.Grant(5, 10, t0, 4))
	s.Extend(4, t0+10)
	s.Extend(5, t0-1)
	if s.usableUntil != t0 {
		t.Fatalf("usable until %d, want %d", s.usableUntil, t0)
	}
	s.Extend(5, t0+10)
	if s.usableUntil != t0+10 || s.lowWater != 4 {
		t.Fatalf("after the extension: until %d, low water %d", s.usableUntil, s.lowWater)
	}
}

// TestAReclaimedSliceReturnsWhatItsReservationsLeave: the control plane
// asks a slice back (Reclaim) while a reservation holds part of it. The
// unspent units go back at once; what the reservation leaves when it
// settles is owed too and goes back unasked (ReturnDue), under the
// current token. Once nothing is held, or a grant comes, nothing more is
// owed: later settlements refund the slice as usual.
func TestAReclaimedSliceReturnsWhatItsReservationsLeave(t *testing.T) {
	f := newFixture(t, nil)
	r1 := f.start(oneReq, t0)
	r2 := f.start(oneReq, t0)
	l, _ := f.e.Lease("acme")
	quote := f.e.Quote(r1)
	if got := l.Reclaim(); got != (LeaseReturn{Token: 1, Units: 1_000_000 - 2*quote}) {
		t.Fatalf("reclaim returned %+v", got)
	}
	f.e.DrainRefills(nil)
	f.e.Finish(r1, 2, t0)
	reqs := f.e.DrainRefills(nil)
	if len(reqs) != 1 || !reqs[0].ReturnDue {
		t.Fatalf("a settlement of an owed slice asked nothing back: %+v", reqs)
	}
	if back := l.TakeRetired(nil); len(back) != 1 || back[0] != (LeaseReturn{Token: 1, Units: quote - 2}) {
		t.Fatalf("owed return = %+v, want the %d units the reservation left", back, quote-2)
	}
	f.e.Finish(r2, quote, t0) // billed in full: nothing left to return
	if reqs := f.e.DrainRefills(nil); len(reqs) != 0 {
		t.Fatalf("a settlement that left nothing asked for a return: %+v", reqs)
	}
	if back := l.TakeRetired(nil); len(back) != 0 {
		t.Fatalf("returned %+v with nothing held", back)
	}
	// A grant ends what is owed: the plane is funding this slice again.
	must(t, f.e.GrantLease("acme", 1, 500, t0+3600e9, 0))
	r3 := f.start(oneReq, t0)
	l.Reclaim()
	must(t, f.e.GrantLease("acme", 1, 500, t0+3600e9, 0))
	f.e.DrainRefills(nil)
	f.e.Finish(r3, 1, t0)
	if reqs := f.e.DrainRefills(nil); len(reqs) != 0 || l.Units() != 500+quote-1 {
		t.Fatalf("after a grant the slice returned a refund: %+v, units %d", reqs, l.Units())
	}
	f.conserved()
}
