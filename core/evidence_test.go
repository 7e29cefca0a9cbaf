package core

import "testing"

func TestEvidencePacksIntoTheSeqlockWords(t *testing.T) {
	for _, e := range []FundingEvidence{
		{},
		{Remaining: MaxCostUnits, ResetAt: 1_800_000_000e9, Next: MaxCostUnits, Scope: ScopeOrg, Period: PeriodMonth,
			Ceiling: MaxCostUnits},
		{Remaining: 1, ResetAt: -2, Next: 7, Scope: ScopeWorkspace, Period: PeriodDay, Ceiling: 1<<48 - 2},
	} {
		if got := (FundingEvidence{}).Unpack(e.Pack()); got != e {
			t.Fatalf("round trip %+v → %+v", e, got)
		}
	}
}

func TestWindowNamesAreSeed000s(t *testing.T) {
	want := map[BudgetPeriod]string{PeriodNone: "", PeriodDay: "daily", PeriodWeek: "weekly", PeriodMonth: "monthly", 9: ""}
	for p, w := range want {
		if p.Window() != w {
			t.Errorf("%d.Window() = %q, want %q", p, p.Window(), w)
		}
	}
}

// TestCeilingKeepsFortyEightBits: a ceiling above what the packed record
// keeps reads back as unbounded, never as less than it was.
func TestCeilingKeepsFortyEightBits(t *testing.T) {
	for c, want := range map[CostUnits]CostUnits{
		0: 0, 1<<48 - 2: 1<<48 - 2, 1<<48 - 1: MaxCostUnits, 1 << 48: MaxCostUnits, MaxCostUnits: MaxCostUnits,
	} {
		if got := (FundingEvidence{}).Unpack(FundingEvidence{Ceiling: c}.Pack()).Ceiling; got != want {
			t.Errorf("ceiling %d packs as %d, want %d", c, got, want)
		}
	}
}

// TestAFinalRefusalHoldsAcrossPeriodBoundariesUntilItsReset: the evidence
// of a debtor whose debt outlasts today's boundary keeps refusing after
// that boundary, before the ledger's rollover is republished (the
// rollover would refuse too), and says when the debt is repaid; at that
// reset the refusal is transient again (the lease path decides). A quote
// above the ceiling has no reset (oneReq quotes 102).
func TestAFinalRefusalHoldsAcrossPeriodBoundariesUntilItsReset(t *testing.T) {
	f := newFixture(t, nil)
	cell := new(EvidenceCell)
	must(t, f.e.SetEvidence("acme", cell))
	l, _ := f.e.Lease("acme")
	l.TakeUnspent()
	const day = int64(24 * 3600e9)
	boundary, reset := t0+3600e9, t0+3600e9+19*day
	debtor := FundingEvidence{Remaining: 0, ResetAt: reset, Next: 150, PeriodEnd: boundary, Scope: ScopeWorkspace, Period: PeriodDay, Ceiling: 200}
	cell.Store(debtor)
	for _, now := range []int64{t0, boundary - 1, boundary, boundary + 1e6, boundary + day, reset - 1} {
		if _, d := f.admit(oneReq, now); d.Reason != DenyBalanceExhausted || d.ResetAt != reset || d.Scope != ScopeWorkspace {
			t.Fatalf("at %+d ns from the boundary: %+v, want balance-exhausted until %d", now-boundary, d, reset)
		}
	}
	if _, d := f.admit(oneReq, reset); d.Reason.Retry() != RetryTransient {
		t.Fatalf("at the reset: %+v, want the transient lease refusal", d)
	}
	debtor.Ceiling = 101
	cell.Store(debtor)
	if _, d := f.admit(oneReq, t0); d.Reason != DenyBalanceExhausted || d.ResetAt != 0 {
		t.Fatalf("a quote above the ceiling: %+v, want no reset", d)
	}
	short := FundingEvidence{Remaining: 40, ResetAt: boundary, Next: 140, PeriodEnd: boundary, Scope: ScopeOrg, Period: PeriodDay, Ceiling: 200}
	cell.Store(short)
	if _, d := f.admit(oneReq, t0); d.Reason != DenyBalanceInsufficient || d.ResetAt != boundary {
		t.Fatalf("insufficient within the ceiling: %+v", d)
	}
	short.Ceiling = 101
	cell.Store(short)
	if _, d := f.admit(oneReq, t0); d.Reason != DenyBalanceInsufficient || d.ResetAt != 0 {
		t.Fatalf("insufficient above the ceiling: %+v", d)
	}
}
