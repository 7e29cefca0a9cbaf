package core

// Share is one engine's part of an account's rate and concurrency limits
// when several engines (a node's shards) serve the account. The control
// plane keeps each limit's shares summing to at most the snapshot's value,
// so the node as a whole never admits more than the limit; it moves share
// toward the engines that run out (see RefillRequest.RateStarved), so one
// busy shard can use nearly the whole limit while the others idle.
//
// A share applies only to limits the snapshot sets; a zero field in a
// share means "none of it here for now", not "unlimited".
type Share struct {
	RequestRate, RequestBurst uint32
	UnitRate, UnitBurst       uint32
	MaxConcurrent             uint32
}

// shareRetryHint is the retry advice when a refusal is only this engine's
// share running out: the control plane usually moves share within it.
const shareRetryHint = int64(2e6)

// SetShare gives this engine share of account id's limits. Shrinking takes
// effect at once: tokens above the new burst cannot be spent.
func (e *Engine) SetShare(id AccountID, s Share) error {
	a := e.accounts[id]
	if a == nil {
		return ErrUnknownAccount
	}
	a.share = s
	a.shared = true
	a.rateStarved = false
	return nil
}

// ClearShare makes the engine enforce the snapshot's limits alone again.
func (e *Engine) ClearShare(id AccountID) {
	if a := e.accounts[id]; a != nil {
		a.shared = false
	}
}

// effective returns the limits this engine enforces for a: the snapshot's,
// or this engine's share of them.
func (a *account) effective(l *Limits) (reqRate, reqBurst, unitRate, unitBurst, maxConc uint32) {
	reqRate, reqBurst, unitRate, unitBurst, maxConc = l.RequestRate, l.RequestBurst, l.UnitRate, l.UnitBurst, l.MaxConcurrent
	if a.shared {
		if reqRate != 0 {
			reqRate, reqBurst = a.share.RequestRate, a.share.RequestBurst
		}
		if unitRate != 0 {
			unitRate, unitBurst = a.share.UnitRate, a.share.UnitBurst
		}
		if maxConc != 0 {
			maxConc = a.share.MaxConcurrent
		}
	}
	return
}

// starve records that a's share refused a request, so the control plane
// hears of it with the next refill drain.
func (e *Engine) starve(a *account) {
	if !a.shared {
		return
	}
	a.rateStarved = true
	if !a.refillQueued {
		a.refillQueued = true
		e.refills = append(e.refills, a)
	}
}

// AccountInFlight is how many reservations id holds on this engine.
func (e *Engine) AccountInFlight(id AccountID) uint32 {
	if a := e.accounts[id]; a != nil {
		return a.inflight
	}
	return 0
}
