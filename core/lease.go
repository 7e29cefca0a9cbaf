package core

import "errors"

// MaxRetiringLeases bounds how many superseded leases a slot keeps while
// reservations funded by them are still outstanding.
const MaxRetiringLeases = 3

// ErrRetiringFull refuses a grant with a new fencing token while every
// retiring place is taken by a lease that still funds live reservations.
// The control plane retries after those settle.
var ErrRetiringFull = errors.New("core: too many superseded leases still funding reservations")

// ErrStaleFence refuses a grant whose fencing token is older than the
// current lease's: tokens only move forward.
var ErrStaleFence = errors.New("core: lease grant with a stale fencing token")

// leaseFunds is one lease's share in this slot.
type leaseFunds struct {
	token uint64    // fencing token; 0 = no lease
	units CostUnits // spendable
	held  uint32    // reservations it funds that have not settled
	// owed: the control plane asked these units back (Reclaim) while
	// reservations held some of them; what those leave when they settle
	// goes back too, unasked (returnDue), until none is held or a grant
	// comes. A gather that found the last units of an account reserved
	// would otherwise never see them again once a reservation released
	// them, and a request they could pay elsewhere would wait in vain.
	owed bool
}

// LeaseSlot is one shard's slice of an account's funding. The shard spends it
// with plain arithmetic; the control plane tops it up, replaces it (a new
// fencing token) and takes back what is unspent. It keeps an exact account:
//
//	granted == available + heldUnits + billed + returned
//
// where available counts the current and every retiring lease.
//
// The fields every debit and settlement touch come first.
type LeaseSlot struct {
	cur         leaseFunds
	usableUntil int64 // Unix ns: debits and commits stop here (expiry − safety margin)
	lowWater    CostUnits
	heldUnits   CostUnits
	billed      CostUnits
	// Above: what every debit and settlement touch (56 bytes). Below: read
	// only when something is signalled.

	// wantRefill is set by the debit that crosses low water (or is refused),
	// and cleared when the control plane answers with a grant.
	wantRefill bool
	// returnDue is set when a retiring lease's last reservation settles:
	// its units can go back to the control plane without being asked.
	returnDue bool

	// largestRefused is the biggest quote refused for want of units since
	// the last grant, and not refused for good by the funding evidence
	// (noteRefused); the control plane grows the next grant to it.
	largestRefused    CostUnits
	granted, returned CostUnits
	retiring          [MaxRetiringLeases]leaseFunds
}

// Grant adds units from the lease with fencing token token, usable until
// usableUntil. The same token tops up and extends the current lease; a newer
// token supersedes it, and the old lease retires, still settling the
// reservations it funds, until its unspent units are taken back.
func (s *LeaseSlot) Grant(token uint64, units CostUnits, usableUntil int64, lowWater CostUnits) error {
	if token == 0 {
		return errors.New("core: fencing token 0 is not a lease")
	}
	if token < s.cur.token {
		return ErrStaleFence
	}
	granted, err := s.granted.Add(units)
	if err != nil {
		return err
	}
	if token > s.cur.token && s.cur.token != 0 {
		i := s.freeRetiring()
		if i < 0 {
			return ErrRetiringFull
		}
		s.retiring[i] = s.cur
		s.cur = leaseFunds{}
	}
	cur, err := s.cur.units.Add(units)
	if err != nil {
		return err
	}
	s.cur.token, s.cur.units, s.cur.owed = token, cur, false
	s.granted = granted
	s.usableUntil, s.lowWater = usableUntil, lowWater
	s.largestRefused, s.wantRefill = 0, false
	return nil
}

// noteRefused records quote, refused for want of units here, as a need the
// next grant should cover. The engine calls it only when the refusal is
// not final: a quote the funding evidence shows out of reach is no reason
// to fund this slice beyond what it holds, and a need that outlives its
// request would keep the slice from being funded for smaller ones.
func (s *LeaseSlot) noteRefused(quote CostUnits) {
	s.largestRefused = max(s.largestRefused, quote)
}

func (s *LeaseSlot) freeRetiring() int {
	for i := range s.retiring {
		if s.retiring[i].token == 0 {
			return i
		}
		if s.retiring[i].held == 0 && s.retiring[i].units == 0 {
			s.retiring[i] = leaseFunds{}
			return i
		}
	}
	return -1
}

// debit takes quote from the current lease for a new reservation. signal
// reports that the slot wants a refill (a refusal, or low water crossed),
// so the caller reads wantRefill's cold line only then.
func (s *LeaseSlot) debit(quote CostUnits, now int64) (r DenyReason, signal bool) {
	switch {
	case s.cur.token == 0:
		s.wantRefill = true
		return DenyLeaseUnavailable, true
	case now >= s.usableUntil:
		s.wantRefill = true
		return DenyLeaseExpired, true
	case s.cur.units < quote:
		s.wantRefill = true
		return DenyLeaseExhausted, true
	}
	s.cur.units -= quote
	s.cur.held++
	s.heldUnits = mustAdd(s.heldUnits, quote)
	if s.cur.units < s.lowWater {
		s.wantRefill = true
		return DenyNone, true
	}
	return DenyNone, false
}

// settle closes a reservation of quote funded by the lease with token,
// billing billed ≤ quote and returning the rest to that lease. It reports
// whether that left a retiring lease funding nothing (returnDue).
func (s *LeaseSlot) settle(token uint64, quote, billed CostUnits) bool {
	f := s.funds(token)
	if f == nil || f.held == 0 || billed > quote {
		panic("core: invariant broken: settling a reservation its lease does not hold")
	}
	f.held--
	f.units = mustAdd(f.units, quote-billed)
	s.heldUnits = mustSub(s.heldUnits, quote)
	s.billed = mustAdd(s.billed, billed)
	if f != &s.cur && f.held == 0 || f.owed && quote > billed {
		s.returnDue = true
		return true
	}
	return false
}

func (s *LeaseSlot) funds(token uint64) *leaseFunds {
	if token == s.cur.token {
		return &s.cur
	}
	for i := range s.retiring {
		if s.retiring[i].token == token {
			return &s.retiring[i]
		}
	}
	return nil
}

// LeaseReturn is unspent funding handed back to the control plane.
type LeaseReturn struct {
	Token uint64
	Units CostUnits
}

// Retire ends the current lease's use here when it has fencing token
// token (the control plane is handing it back to the ledger): its unspent
// units are returned, and it moves to a retiring place, where reservations
// it funds keep settling; once they have, TakeRetired returns the rest
// (returnDue says when). Without a free retiring place it only returns the
// unspent units and stays current; the control plane asks again.
func (s *LeaseSlot) Retire(token uint64) LeaseReturn {
	if token == 0 || s.cur.token != token {
		return LeaseReturn{}
	}
	r := s.TakeUnspent()
	s.cur.owed = false // retiring returns everything once it funds nothing
	if i := s.freeRetiring(); i >= 0 {
		s.retiring[i] = s.cur
		s.cur = leaseFunds{}
		if s.retiring[i].held == 0 {
			s.retiring[i] = leaseFunds{}
		}
	}
	return r
}

// Extend moves the current lease's usable-until time when it has fencing
// token token: the control plane extended the lease in the ledger.
func (s *LeaseSlot) Extend(token uint64, usableUntil int64) {
	if token != 0 && s.cur.token == token && usableUntil > s.usableUntil {
		s.usableUntil = usableUntil
	}
}

// ReturnDue reports whether a retiring lease has stopped funding anything,
// or a settlement left units of an owed current lease, since the last
// TakeRetired.
func (s *LeaseSlot) ReturnDue() bool { return s.returnDue }

// TakeRetired removes every retiring lease that funds nothing any more and
// returns its unspent units; the control plane releases them to the ledger.
// What an owed current lease holds (Reclaim) goes back with them.
func (s *LeaseSlot) TakeRetired(dst []LeaseReturn) []LeaseReturn {
	s.returnDue = false
	if s.cur.owed {
		if s.cur.units > 0 {
			dst = append(dst, s.Reclaim())
		}
		s.cur.owed = s.cur.held > 0
	}
	for i := range s.retiring {
		f := &s.retiring[i]
		if f.token != 0 && f.held == 0 {
			dst = append(dst, LeaseReturn{Token: f.token, Units: f.units})
			s.returned = mustAdd(s.returned, f.units)
			*f = leaseFunds{}
		}
	}
	return dst
}

// TakeUnspent empties the current lease (for shutdown, or a lease the
// control plane is about to release) and returns what it held. Reservations
// it still funds keep settling into it; a later TakeUnspent returns those.
func (s *LeaseSlot) TakeUnspent() LeaseReturn {
	r := LeaseReturn{Token: s.cur.token, Units: s.cur.units}
	s.returned = mustAdd(s.returned, s.cur.units)
	s.cur.units = 0
	return r
}

// Reclaim is TakeUnspent for the control plane moving units between
// shards: units that reservations hold now are owed too, and go back as
// their reservations settle (ReturnDue, TakeRetired) until a grant comes.
func (s *LeaseSlot) Reclaim() LeaseReturn {
	r := s.TakeUnspent()
	s.cur.owed = s.cur.held > 0
	return r
}

// Units is what the current lease can still fund.
func (s *LeaseSlot) Units() CostUnits { return s.cur.units }

// Token is the current lease's fencing token (0 = none).
func (s *LeaseSlot) Token() uint64 { return s.cur.token }

// LargestRefused is the biggest quote refused since the last grant.
func (s *LeaseSlot) LargestRefused() CostUnits { return s.largestRefused }

// WantsRefill reports whether low water was crossed or a quote refused.
func (s *LeaseSlot) WantsRefill() bool { return s.wantRefill }

// LeaseBalance is a LeaseSlot's exact account.
type LeaseBalance struct {
	Granted, Available, Held, Billed, Returned CostUnits
	Outstanding                                uint32 // reservations not settled
}

// Balance reports the slot's account.
func (s *LeaseSlot) Balance() LeaseBalance {
	b := LeaseBalance{Granted: s.granted, Available: s.cur.units, Held: s.heldUnits,
		Billed: s.billed, Returned: s.returned, Outstanding: s.cur.held}
	for _, f := range s.retiring {
		b.Available = mustAdd(b.Available, f.units)
		b.Outstanding += f.held
	}
	return b
}

// Conserved reports whether granted == available + held + billed + returned.
func (b LeaseBalance) Conserved() bool {
	sum, err := b.Available.Add(b.Held)
	if err == nil {
		sum, err = sum.Add(b.Billed)
	}
	if err == nil {
		sum, err = sum.Add(b.Returned)
	}
	return err == nil && sum == b.Granted
}
