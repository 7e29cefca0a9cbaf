package core

import (
	"math"

	"github.com/tollgated/tollgated/seqlock"
)

// FundingEvidence is what the ledger last attested about an account's
// funding, over its funding chain (the account and its metered
// ancestors), and what the data plane derives from it at any time by the
// rollover rule, without waiting for the ledger's rollover to be
// republished.
//
// Remaining is an upper bound on what the chain can spend (units held in
// leases included, debt paid first) until ResetAt. Rollovers only ever
// raise what a scope can spend (a new allowance, which repays debt first),
// so the bound stays true until the first rollover that can raise the
// chain's smallest scope: ResetAt. For an exhausted chain (Remaining 0)
// that is the latest of its exhausted scopes' resets, each the first
// period end whose new allowance — after as many periods of repaying a
// debt as it takes — leaves something to spend; otherwise the period end
// of the scope(s) at Remaining. ResetAt 0 means never: a scope at
// Remaining has no period (top-ups only), or its debt outlasts any time
// the evidence can name.
//
// Next is what the chain can spend once every scope has rolled over at
// ResetAt. Every period starts at 00:00 UTC, so no scope rolls over again
// for a day after ResetAt: Next holds for that day (long after the ledger
// has rolled the budgets and republished).
//
// Ceiling bounds what the chain can ever hold again without new money,
// however many periods pass: a need above it is met by no reset. Scope is
// the binding scope (the exhausted one whose reset comes last; among
// scopes at Remaining otherwise, the one closest to the account), Period
// its budget period and PeriodEnd its current period's end (0: none; the
// ledger's, not carried to the data plane).
type FundingEvidence struct {
	Remaining CostUnits
	ResetAt   int64
	Next      CostUnits
	Ceiling   CostUnits
	Scope     Scope
	Period    BudgetPeriod // Scope's budget period: seed 000's "window"
	PeriodEnd int64
}

// day is the shortest time between two rollovers of any scope.
const day = int64(24 * 3600e9)

// At is what the chain can spend at now by the evidence and the rollover
// rule; ok is false once the evidence no longer says (a day past ResetAt:
// by then the ledger has republished).
func (e FundingEvidence) At(now int64) (CostUnits, bool) {
	switch {
	case e.ResetAt == 0 || now < e.ResetAt:
		return e.Remaining, true
	case now-e.ResetAt < day:
		return e.Next, true
	}
	return 0, false
}

// ResetFor is, for a need of units (at least 1) refused at now, the
// earliest time rollovers alone could meet it: ResetAt when that reset
// brings enough (Next); when it does not, a day after it, the earliest
// another rollover could bring more; 0 (never) when no reset will (need
// above Ceiling, or no reset the evidence can name).
func (e FundingEvidence) ResetFor(need CostUnits, now int64) int64 {
	switch {
	case e.ResetAt == 0 || need > e.Ceiling:
		return 0
	case now < e.ResetAt && need <= e.Next:
		return e.ResetAt
	case e.ResetAt > math.MaxInt64-day:
		return 0
	}
	return e.ResetAt + day
}

// BudgetPeriod is how often an account's allowance renews, on UTC
// boundaries.
type BudgetPeriod uint8

const (
	PeriodNone  BudgetPeriod = iota // no allowance; top-ups only
	PeriodDay                       // 00:00 UTC each day
	PeriodWeek                      // 00:00 UTC each Monday
	PeriodMonth                     // 00:00 UTC on the 1st
)

var windowNames = [...]string{PeriodNone: "", PeriodDay: "daily", PeriodWeek: "weekly", PeriodMonth: "monthly"}

// Window names the period the way seed 000 reports it ("daily", …), or ""
// for none.
func (p BudgetPeriod) Window() string {
	if int(p) < len(windowNames) {
		return windowNames[p]
	}
	return ""
}

// Pack and Unpack let a seqlock.Cell carry what the data plane reads of
// the evidence in its four words: Remaining, ResetAt, Next, and Scope,
// Period and Ceiling in one (PeriodEnd stays behind). Ceiling keeps 48
// bits: one above that packs as "unbounded" (MaxCostUnits), which never
// turns a need away.
func (e FundingEvidence) Pack() [seqlock.Words]uint64 {
	return [seqlock.Words]uint64{uint64(e.Remaining), uint64(e.ResetAt), uint64(e.Next),
		uint64(e.Scope) | uint64(e.Period)<<8 | min(uint64(e.Ceiling), ceilingMask)<<16}
}

func (FundingEvidence) Unpack(w [seqlock.Words]uint64) FundingEvidence {
	c := CostUnits(w[3] >> 16)
	if c == ceilingMask {
		c = MaxCostUnits
	}
	return FundingEvidence{Remaining: CostUnits(w[0]), ResetAt: int64(w[1]), Next: CostUnits(w[2]),
		Scope: Scope(w[3]), Period: BudgetPeriod(w[3] >> 8), Ceiling: c}
}

// ceilingMask is the largest Ceiling the packed record keeps exactly.
const ceilingMask = math.MaxUint64 >> 16

// EvidenceCell is where the control plane publishes an account's funding
// evidence and shards read it. The control plane is its only writer.
type EvidenceCell = seqlock.Cell[FundingEvidence]

// fundingRefusal turns a lease refusal into the reason to report. Evidence
// is consulted only after lease funding (and any overage) failed, and only
// evidence that still says what the chain can spend at now (FundingEvidence.At)
// can turn a transient lease refusal into a final one: an estimate never
// refuses a fundable quote. A final refusal says when rollovers alone
// could fund the quote, if any can.
func fundingRefusal(cell *EvidenceCell, leaseReason DenyReason, quote CostUnits, leaseUnits CostUnits, now int64) Denial {
	d := Denial{Reason: leaseReason}
	if leaseReason == DenyLeaseExhausted {
		d.Remaining = leaseUnits
	}
	if cell == nil || !cell.Present() {
		return d
	}
	ev, ok := cell.Load()
	if !ok {
		return d
	}
	left, ok := ev.At(now)
	switch {
	case !ok:
		return d
	case left == 0:
		return Denial{Reason: DenyBalanceExhausted, Scope: ev.Scope, ResetAt: ev.ResetFor(max(quote, 1), now)}
	case quote > left:
		return Denial{Reason: DenyBalanceInsufficient, Remaining: left, Scope: ev.Scope, ResetAt: ev.ResetFor(quote, now)}
	}
	return d
}
