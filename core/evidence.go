package core

import "github.com/tollgated/tollgated/seqlock"

// FundingEvidence is what the ledger last attested about an account's
// funding: Remaining is an upper bound on what it can still spend (units
// held in leases included), valid until PeriodEnd (Unix ns, 0 = no period).
// Scope names the level of the hierarchy the evidence is about.
type FundingEvidence struct {
	Remaining CostUnits
	PeriodEnd int64
	Scope     Scope
	Period    BudgetPeriod // Scope's budget period: seed 000's "window"
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

// Pack and Unpack let a seqlock.Cell carry the evidence.
func (e FundingEvidence) Pack() [seqlock.Words]uint64 {
	return [seqlock.Words]uint64{uint64(e.Remaining), uint64(e.PeriodEnd), uint64(e.Scope) | uint64(e.Period)<<8, 0}
}

func (FundingEvidence) Unpack(w [seqlock.Words]uint64) FundingEvidence {
	return FundingEvidence{Remaining: CostUnits(w[0]), PeriodEnd: int64(w[1]), Scope: Scope(w[2]), Period: BudgetPeriod(w[2] >> 8)}
}

// EvidenceCell is where the control plane publishes an account's funding
// evidence and shards read it. The control plane is its only writer.
type EvidenceCell = seqlock.Cell[FundingEvidence]

// fundingRefusal turns a lease refusal into the reason to report. Evidence
// is consulted only after lease funding (and any overage) failed, and only
// live evidence can turn a transient lease refusal into a final one: an
// estimate never refuses a fundable quote.
func fundingRefusal(cell *EvidenceCell, leaseReason DenyReason, quote CostUnits, leaseUnits CostUnits, now int64) Denial {
	d := Denial{Reason: leaseReason}
	if leaseReason == DenyLeaseExhausted {
		d.Remaining = leaseUnits
	}
	if cell == nil || !cell.Present() {
		return d
	}
	ev, ok := cell.Load()
	if !ok || (ev.PeriodEnd != 0 && now >= ev.PeriodEnd) {
		return d
	}
	switch {
	case ev.Remaining == 0:
		return Denial{Reason: DenyBalanceExhausted, Scope: ev.Scope, PeriodEnd: ev.PeriodEnd}
	case quote > ev.Remaining:
		return Denial{Reason: DenyBalanceInsufficient, Remaining: ev.Remaining, Scope: ev.Scope, PeriodEnd: ev.PeriodEnd}
	}
	return d
}
