package core

import "sync/atomic"

// RequestContext is a request between Begin and Admit. It pins the snapshot
// Begin resolved: limits read from it are the ones the request is judged by.
type RequestContext struct {
	prin *principalEntry
	pol  *policy
	ttl  int64
	// capture is what the reservation Admit makes will be (SetCapture).
	capture Capture
	// rated: the request's rate tokens were taken by an earlier attempt
	// (see Rated).
	rated bool
	// reqBucket is the account's request bucket once Admit's request-rate
	// stage has run (nil before), with the rate, burst and time it ran
	// at: RequestsLeft reads it only when an answer shows it, so /v1/check
	// pays nothing for it.
	reqBucket         *bucket
	reqRate, reqBurst uint32
	reqAt             int64
}

// RequestsLeft is what the account's request-rate bucket on this engine
// held once Admit's request-rate stage had run (after the request took its
// token, or refused it for want of one): whole requests left, and
// nanoseconds until the bucket is full again. ok is false until that stage
// has run (and always when the policy sets no request rate). It describes
// this engine's share of the limit (each shard holds one), not the node's.
// It reads the bucket as it is now, refilled to Admit's time, so call it
// while answering, before the engine admits anything else.
func (c *RequestContext) RequestsLeft() (left uint32, full int64, ok bool) {
	if c.reqBucket == nil {
		return 0, 0, false
	}
	left, full = c.reqBucket.left(c.reqRate, c.reqBurst, c.reqAt)
	return left, full, true
}

// Rated marks a request that is tried again after a funding refusal: its
// first attempt passed the rate limits and took their tokens (refusals
// after that stage do not give them back), so this attempt must not take
// them again — or a request held for a moment's funding gap would be
// refused as rate limited by its own earlier attempt.
func (c *RequestContext) Rated() { c.rated = true }

// Snapshot is the pinned snapshot.
func (c *RequestContext) Snapshot() *Snapshot { return c.pol.src }

// Limits are the pinned limits; decode the body under these.
func (c *RequestContext) Limits() *Limits { return &c.pol.Limits }

// Generation is the pinned snapshot's generation.
func (c *RequestContext) Generation() uint64 { return c.pol.src.Generation }

// PolicyRevision is the pinned policy revision.
func (c *RequestContext) PolicyRevision() *PolicyRevision { return &c.pol.src.Revision }

// Account is the account the request acts for.
func (c *RequestContext) Account() AccountID { return c.pol.src.Account }

// SetTTL overrides how long the reservation may live (ns), clamped to
// (0, MaxHoldTimeout]. The default is the snapshot's HoldTimeout.
func (c *RequestContext) SetTTL(ttl int64) {
	c.ttl = min(max(ttl, 1), MaxHoldTimeout)
}

// Require checks permissions the request names only in its body (decoded
// after Begin) against the pinned snapshot, counting a refusal.
func (e *Engine) Require(c *RequestContext, perms PermissionSet) DenyReason {
	if c.pol == nil {
		return e.refuse(DenyUnknownPrincipal)
	}
	if !c.pol.Permissions.Has(perms) {
		return e.refuse(DenyMissingPermission)
	}
	return DenyNone
}

// Begin resolves principal's account snapshot with one lookup, checks the
// account's standing and the route's required permissions, and pins the
// snapshot for the rest of the request.
// Its refusals carry no payload, so it reports only the reason.
func (e *Engine) Begin(p Principal, required PermissionSet, now int64) (RequestContext, DenyReason) {
	// principals.get, spelled out so that the small-table probe stays
	// inlined: as a call, the cheapest refusal went from 5 to 8.6 ns.
	var pe *principalEntry
	if e.principals.cache == nil {
		pe = e.principals.probe(p)
	} else {
		pe = e.principals.getCached(p)
	}
	if pe == nil {
		return RequestContext{}, e.refuse(DenyUnknownPrincipal)
	}
	a := pe.acct
	s := &a.hot
	if r := standing(s, now); r != DenyNone {
		return RequestContext{}, e.refuse(r)
	}
	if !s.Permissions.Has(required) {
		return RequestContext{}, e.refuse(DenyMissingPermission)
	}
	return RequestContext{prin: pe, pol: a.pinned, ttl: s.Limits.HoldTimeout}, DenyNone
}

func standing(s *policy, now int64) DenyReason {
	switch {
	case s.Status == StatusSuspended:
		return DenyAccountSuspended
	case s.Status == StatusClosed:
		return DenyAccountClosed
	case s.ValidUntil != 0 && now >= s.ValidUntil:
		return DenySnapshotExpired
	}
	return DenyNone
}

func (e *Engine) refuse(r DenyReason) DenyReason {
	e.counters.Denials[r]++
	return r
}

// Admit checks, in order, the workload's shape, the request-count rate, the
// cost-weighted rate, concurrency (principal, then account) and funding, and
// on success reserves the quote. Admit owns slot from the call on: on
// refusal it releases it, on success the reservation records or releases it
// exactly once. Rate tokens taken are not returned if a later check refuses.
func (e *Engine) Admit(c *RequestContext, work []WorkItem, slot UsageSlot, now int64) (Reservation, Denial) {
	pe := c.prin
	if pe == nil {
		return e.refuseAdmit(slot, deny(DenyUnknownPrincipal))
	}
	s := pe.acct.policy(c.pol)
	if s.ValidUntil != 0 && now >= s.ValidUntil {
		return e.refuseAdmit(slot, deny(DenySnapshotExpired))
	}
	p, reason := s.Costs.quote(work)
	l := &s.Limits
	switch {
	case reason != DenyNone:
	case p.items > l.MaxItems:
		reason = DenyRequestTooLarge
	case !s.Permissions.Has(p.perms):
		reason = DenyMissingPermission
	case l.UnitRate != 0 && p.quote > CostUnits(l.UnitBurst):
		reason = DenyUnpriceableUnderLimits
	}
	if reason != DenyNone {
		return e.refuseAdmit(slot, deny(reason))
	}
	a := pe.acct
	reqRate, reqBurst, unitRate, unitBurst, maxConc := a.effective(l)
	if l.RequestRate != 0 {
		ok, wait := c.rated, int64(0)
		if !ok {
			ok, wait = a.req.take(1, reqRate, reqBurst, now)
		}
		c.reqBucket, c.reqRate, c.reqBurst, c.reqAt = &a.req, reqRate, reqBurst, now
		if !ok {
			e.starve(a)
			return e.refuseAdmit(slot, Denial{Reason: DenyRequestRateLimited, RetryAfter: wait})
		}
	}
	if l.UnitRate != 0 && !c.rated {
		if ok, wait := a.units.take(uint64(p.quote), unitRate, unitBurst, now); !ok {
			e.starve(a)
			return e.refuseAdmit(slot, Denial{Reason: DenyRateLimited, RetryAfter: wait})
		}
	}
	if l.PrincipalMaxConcurrent != 0 && pe.inflight >= min(l.PrincipalMaxConcurrent, maxConc) {
		e.starve(a)
		return e.refuseAdmit(slot, Denial{Reason: DenyConcurrencyLimited, RetryAfter: a.freeHint(pe.inflight)})
	}
	if l.MaxConcurrent != 0 && a.inflight >= maxConc {
		e.starve(a)
		return e.refuseAdmit(slot, Denial{Reason: DenyConcurrencyLimited, RetryAfter: a.freeHint(a.inflight)})
	}
	if len(e.res.free) == 0 {
		return e.refuseAdmit(slot, deny(DenyCapacityUnavailable))
	}
	token, fundedTil, r := e.fund(a, s, p.quote, now)
	if r != DenyNone {
		d := fundingRefusal(a.evidence, r, p.quote, a.lease.cur.units, now)
		if d.Reason != DenyBalanceExhausted && d.Reason != DenyBalanceInsufficient {
			a.lease.noteRefused(p.quote) // the evidence does not rule it out: a need
		}
		return e.refuseAdmit(slot, d)
	}
	idx, rs, _ := e.res.alloc()
	pe.inflight++
	a.inflight++
	rs.acct, rs.prin, rs.pol, rs.usage = a, pe, c.pol, slot
	rs.quote, rs.token, rs.fundedTil = p.quote, token, fundedTil
	rs.admitted, rs.deadline, rs.permit = now, now+c.ttl, permitNone
	rs.capture = c.capture
	rs.phase = phasePending
	e.counters.Admitted++
	e.counters.UnitsAdmitted = mustAdd(e.counters.UnitsAdmitted, p.quote)
	return Reservation{idx: idx, gen: rs.gen}, Denial{}
}

// refuseAdmit ends a refused admission: the slot is released, the refusal
// counted.
func (e *Engine) refuseAdmit(slot UsageSlot, d Denial) (Reservation, Denial) {
	slot.Release()
	e.counters.Denials[d.Reason]++
	return Reservation{}, d
}

// fund debits quote from the account's lease, or from elastic overage. On
// failure it returns the lease's (or overage cap's) reason; the caller turns
// it into the reported refusal, consulting funding evidence.
func (e *Engine) fund(a *account, s *policy, quote CostUnits, now int64) (token uint64, until int64, r DenyReason) {
	r, signal := a.lease.debit(quote, now)
	if signal {
		e.noteRefill(a)
	}
	if r == DenyNone {
		return a.lease.cur.token, a.lease.usableUntil, DenyNone
	}
	if s.Elastic {
		if sum, err := a.overage.Add(quote); err == nil && sum <= s.src.Mode.OverageCap {
			a.overage = sum
			e.counters.Overage++
			return 0, 0, DenyNone
		}
		r = DenyOverageCapExhausted
	}
	return 0, 0, r
}

// freeHint estimates when one of n in-flight reservations ends: the average
// hold divided among them, at least 1 ms. It is advice, never a promise.
func (a *account) freeHint(n uint32) int64 {
	return max(a.holdAvg/int64(max(n, 1)), 1e6)
}

// AcquireCapacity passes a pending reservation through the execution
// capacity gate. A refusal sheds it: funding returns, the usage slot is
// released without an event, rate tokens stay spent, and the error is
// ErrCapacityUnavailable.
func (e *Engine) AcquireCapacity(r Reservation) error {
	rs := e.res.lookup(r)
	if rs == nil {
		return ErrUnknownReservation
	}
	if rs.phase != phasePending {
		return ErrAlreadyCommitted
	}
	if e.gate != nil {
		pm, ok := e.gate.acquire(rs.acct.policy(rs.pol).Capacity)
		if !ok {
			rs.phase = phaseClosing
			e.counters.Shed++
			e.end(r.idx, rs, 0, false)
			return ErrCapacityUnavailable
		}
		rs.permit = pm
	}
	rs.phase = phaseReady
	return nil
}

// Commit marks the start of execution. It fails if the reservation's
// funding lapsed since admission (strict mode; elastic falls back to
// overage when the cap allows): the error is then ErrFundingExpiredAtStart
// and the work must not run. Commit and Cancel race on one compare-and-swap:
// exactly one wins.
func (e *Engine) Commit(r Reservation, id RequestID, now int64) error {
	rs := e.res.lookup(r)
	if rs == nil {
		e.counters.CommitRefusals++
		return ErrUnknownReservation
	}
	switch rs.phase {
	case phasePending:
		return ErrNotReady
	case phaseCommitted:
		return ErrAlreadyCommitted
	}
	if rs.token != 0 && now >= rs.fundedTil && !e.fallBackToOverage(rs) {
		if !cas(&rs.phase, phaseReady, phaseClosing) {
			e.counters.CommitRefusals++
			return ErrCancelled
		}
		e.counters.RefusedAtStart++
		e.counters.CommitRefusals++
		e.end(r.idx, rs, 0, false)
		return ErrFundingExpiredAtStart
	}
	if !cas(&rs.phase, phaseReady, phaseCommitted) {
		e.counters.CommitRefusals++
		return ErrCancelled
	}
	rs.request = id
	e.counters.Started++
	return nil
}

// fallBackToOverage moves a ready reservation whose lease lapsed onto
// elastic overage, if the account is elastic and the cap has room.
func (e *Engine) fallBackToOverage(rs *resSlot) bool {
	m := rs.acct.policy(rs.pol)
	if !m.Elastic {
		return false
	}
	a := rs.acct
	sum, err := a.overage.Add(rs.quote)
	if err != nil || sum > m.src.Mode.OverageCap {
		return false
	}
	if a.lease.settle(rs.token, rs.quote, 0) {
		e.noteReturn(a)
	}
	a.overage, rs.token = sum, 0
	e.counters.Overage++
	return true
}

// Finish ends a committed reservation, billing units ≤ its quote; the
// unbilled rest returns to the funding it came from. It emits exactly one
// usage event.
func (e *Engine) Finish(r Reservation, units CostUnits, now int64) (CostUnits, error) {
	rs := e.res.lookup(r)
	if rs == nil {
		return 0, ErrUnknownReservation
	}
	if rs.phase != phaseCommitted {
		return 0, ErrNotCommitted
	}
	if units > rs.quote {
		return 0, ErrBilledAboveQuote
	}
	rs.phase = phaseClosing
	e.counters.Finished++
	e.bill(rs, units, now, false)
	e.end(r.idx, rs, now, true)
	return units, nil
}

// Cancel ends a reservation before it started, charging nothing. A
// reservation already committed cannot be cancelled: finish it.
func (e *Engine) Cancel(r Reservation, now int64) error {
	rs := e.res.lookup(r)
	if rs == nil {
		return ErrUnknownReservation
	}
	for {
		ph := atomic.LoadUint32(&rs.phase)
		if ph == phaseCommitted {
			return ErrAlreadyCommitted
		}
		if ph != phasePending && ph != phaseReady {
			return ErrUnknownReservation
		}
		if cas(&rs.phase, ph, phaseClosing) {
			break
		}
	}
	e.counters.Cancelled++
	e.end(r.idx, rs, now, false)
	return nil
}

// bill emits the usage event for a committed reservation.
func (e *Engine) bill(rs *resSlot, units CostUnits, at int64, lapsed bool) {
	src := SourceLease
	if rs.token == 0 {
		src = SourceOverage
	}
	// The event is built field by field in a reused engine field: a
	// composite literal would be built on the stack and copied.
	ev := &e.event
	// Through the account's hot copy: rs.pol is the pinned heap copy, and
	// reading through it would be a cache miss per bill.
	ev.RequestID, ev.Principal, ev.Policy = rs.request, rs.prin.who, rs.acct.policy(rs.pol).src
	ev.Units, ev.Quote, ev.Source, ev.FencingToken = units, rs.quote, src, rs.token
	ev.OccurredAt, ev.Lapsed = at, lapsed
	rs.usage.Record(ev)
	rs.usage = nil
	e.counters.UnitsBilled = mustAdd(e.counters.UnitsBilled, units)
	e.settle(rs, units)
}

// settle returns the unbilled part of the quote to its funding source.
func (e *Engine) settle(rs *resSlot, billed CostUnits) {
	a := rs.acct
	if rs.token != 0 {
		if a.lease.settle(rs.token, rs.quote, billed) {
			e.noteReturn(a)
		}
		return
	}
	a.overage = mustSub(a.overage, rs.quote-billed)
}

// end releases everything a reservation holds and frees its slot. billed
// says whether bill already settled its funding and consumed its usage slot.
func (e *Engine) end(idx uint32, rs *resSlot, now int64, billed bool) {
	a := rs.acct
	if !billed {
		e.settle(rs, 0)
		rs.usage.Release()
	}
	if now > rs.admitted {
		// Moving average with weight 1/8: cheap, and stable enough for advice.
		a.holdAvg += (now - rs.admitted - a.holdAvg) / 8
	}
	rs.prin.inflight--
	a.inflight--
	if e.gate != nil {
		e.gate.release(rs.permit)
	}
	e.res.release(idx)
}
