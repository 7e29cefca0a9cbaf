package core

import "testing"

func TestEvidencePacksIntoTheSeqlockWords(t *testing.T) {
	for _, e := range []FundingEvidence{
		{},
		{Remaining: MaxCostUnits, PeriodEnd: 1_700_000_000e9, Scope: ScopeOrg, Period: PeriodMonth},
		{Remaining: 1, PeriodEnd: -1, Scope: ScopeWorkspace, Period: PeriodDay},
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
