package ledger

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/tollgated/tollgated/core"
)

// owing makes a an account of budget b at now that has spent everything
// and owes debt beyond it, with out units still in leases: what post-paid
// or elastic usage past its funding leaves.
func owing(t *testing.T, a *Account, b Budget, now int64, debt, out core.CostUnits) {
	t.Helper()
	if b.Period != PeriodNone {
		if _, err := ChangeBudget(a, b, now); err != nil {
			t.Fatal(err)
		}
	}
	// Everything deposited is spent or out in leases, and debt more.
	a.AllowanceLeft, a.TopUpLeft = 0, 0
	a.Overage, a.Outstanding = debt+out, out
	a.Settled = a.Deposited + debt - a.Expired
	if err := a.Conserved(); err != nil {
		t.Fatal(err)
	}
}

// chainAt rolls every account of chain over to now and returns the
// chain's smallest Spendable.
func chainAt(t *testing.T, chain []*Account, now int64) core.CostUnits {
	t.Helper()
	least := core.MaxCostUnits
	for _, a := range chain {
		if _, err := RollOver(a, now); err != nil {
			t.Fatal(err)
		}
		s, err := Spendable(a)
		if err != nil {
			t.Fatal(err)
		}
		least = min(least, s)
	}
	return least
}

// TestResetAtIsWhenTheRolloverRuleLetsTheChainSpend checks EvidenceOf
// against the rollover rule itself: over random chains — each scope with a
// budget or top-ups only, some owing debts of many periods' allowances —
// rolling every scope over at each period boundary leaves the chain's
// smallest Spendable at Remaining before ResetAt, raises it to Next at
// ResetAt (0: at no boundary at all), and never lifts it above the Ceiling.
func TestResetAtIsWhenTheRolloverRuleLetsTheChainSpend(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		org, ws, agent := family(t)
		ws.Unmetered = false
		chain := []*Account{agent, ws, org}
		for _, a := range chain {
			b := Budget{Period: Period(rapid.IntRange(0, 3).Draw(rt, "period"))}
			if b.Period != PeriodNone {
				b.Allowance = core.CostUnits(rapid.IntRange(1, 1000).Draw(rt, "allowance"))
			}
			switch rapid.IntRange(0, 2).Draw(rt, "state") {
			case 0: // owes a debt, of up to twenty periods' allowances
				owing(t, a, b, t0, core.CostUnits(rapid.IntRange(0, 20*int(max(b.Allowance, 50))).Draw(rt, "debt")),
					core.CostUnits(rapid.IntRange(0, 300).Draw(rt, "out")))
			case 1: // has spent part of its allowance
				if b.Period != PeriodNone {
					if _, err := ChangeBudget(a, b, t0); err != nil {
						t.Fatal(err)
					}
					spent := core.CostUnits(rapid.IntRange(0, int(b.Allowance)).Draw(rt, "spent"))
					a.AllowanceLeft -= spent
					a.Settled += spent
				}
			case 2: // top-ups
				if err := TopUp(a, core.CostUnits(rapid.IntRange(1, 500).Draw(rt, "top-up"))); err != nil {
					t.Fatal(err)
				}
			}
		}
		ev, err := EvidenceOf(chain)
		if err != nil {
			t.Fatal(err)
		}
		// Walk the boundaries, every scope's period ends in time order, up
		// to the reset, or for a year and a half when there is none.
		now := t0
		for steps := 0; steps < 550; steps++ {
			next := int64(0)
			for _, a := range chain {
				if a.PeriodEnd != 0 && (next == 0 || a.PeriodEnd < next) {
					next = a.PeriodEnd
				}
			}
			if next == 0 || ev.ResetAt != 0 && next > ev.ResetAt {
				break
			}
			now = next
			least := chainAt(t, chain, now)
			if least > ev.Ceiling {
				t.Fatalf("at %d the chain can spend %d, above the ceiling %d (%+v)", now, least, ev.Ceiling, ev)
			}
			switch {
			case now < ev.ResetAt && least != ev.Remaining:
				t.Fatalf("at %d, before the reset at %d, the chain can spend %d, not %d", now, ev.ResetAt, least, ev.Remaining)
			case now == ev.ResetAt && ev.Remaining == 0 && least == 0:
				t.Fatalf("at the reset %d the chain still can spend nothing (%+v)", now, ev)
			case now == ev.ResetAt && least != ev.Next:
				t.Fatalf("at the reset %d the chain can spend %d, not Next %d (%+v)", now, least, ev.Next, ev)
			case ev.ResetAt == 0 && least != ev.Remaining:
				t.Fatalf("at %d the chain can spend %d although it never resets from %d", now, least, ev.Remaining)
			}
		}
	})
}

// TestEvidenceOfExhaustedScopes: when a workspace and its org are both
// exhausted, the evidence names the one whose reset comes last; a debt of
// twenty days' allowance resets at the end of the twentieth day after
// this one; a debt past any time the evidence names, or a scope of
// top-ups only, never resets (0); and the ceiling says what no reset
// brings.
func TestEvidenceOfExhaustedScopes(t *testing.T) {
	midnight, monthEnd := utc(2026, 3, 11, 0, 0), utc(2026, 4, 1, 0, 0)
	org, ws, agent := family(t)
	ws.Unmetered = false
	owing(t, org, Budget{Allowance: 1000, Period: PeriodMonth}, t0, 0, 0)
	owing(t, ws, Budget{Allowance: 100, Period: PeriodDay}, t0, 0, 0)
	ev, err := EvidenceOf([]*Account{ws, org})
	if err != nil || ev != (Evidence{Remaining: 0, ResetAt: monthEnd, Next: 100, Scope: core.ScopeOrg, PeriodEnd: monthEnd, Period: PeriodMonth,
		Ceiling: 100}) {
		t.Fatalf("workspace and org exhausted: %+v, %v", ev, err)
	}
	// A metered agent without money of its own never resets: it binds.
	if ev, _ = EvidenceOf([]*Account{agent, ws, org}); ev.ResetAt != 0 || ev.Scope != core.ScopeAgent || ev.Ceiling != 0 {
		t.Fatalf("with an agent of no money: %+v", ev)
	}
	if err := TopUp(agent, 500); err != nil {
		t.Fatal(err)
	}
	if ev, _ = EvidenceOf([]*Account{agent, ws, org}); ev.ResetAt != monthEnd || ev.Ceiling != 100 {
		t.Fatalf("with the agent topped up: %+v", ev)
	}

	org, _, agent = family(t)
	owing(t, agent, Budget{Allowance: 100, Period: PeriodDay}, t0, 2000, 0)
	if ev, _ = EvidenceOf([]*Account{agent}); ev.ResetAt != midnight+20*dayNs || ev.Scope != core.ScopeAgent || ev.Period != PeriodDay {
		t.Fatalf("twenty days of debt: %+v", ev)
	}
	if got := chainAt(t, []*Account{agent}, midnight+19*dayNs); got != 0 {
		t.Fatalf("the agent can spend %d a day before its reset", got)
	}
	owing(t, agent, Budget{Allowance: 100, Period: PeriodDay}, t0, 100*(maxAdvance+1), 0)
	if ev, _ = EvidenceOf([]*Account{agent}); ev.ResetAt != 0 || ev.Remaining != 0 {
		t.Fatalf("a debt beyond any reset: %+v", ev)
	}
	owing(t, org, Budget{}, t0, 5, 0)
	if ev, _ = EvidenceOf([]*Account{org}); ev != (Evidence{Remaining: 0, Scope: core.ScopeOrg}) { // Next 0 too
		t.Fatalf("top-ups only: %+v", ev)
	}
}

func TestAdvancePeriods(t *testing.T) {
	jan31 := utc(2026, 2, 1, 0, 0)
	for _, c := range []struct {
		p    Period
		end  int64
		n    uint64
		want int64
	}{
		{PeriodDay, jan31, 0, jan31},
		{PeriodDay, jan31, 3, utc(2026, 2, 4, 0, 0)},
		{PeriodWeek, utc(2026, 3, 16, 0, 0), 2, utc(2026, 3, 30, 0, 0)},
		{PeriodMonth, jan31, 1, utc(2026, 3, 1, 0, 0)},
		{PeriodMonth, jan31, 13, utc(2027, 3, 1, 0, 0)},
		{PeriodNone, jan31, 1, 0},
		{PeriodDay, jan31, maxAdvance + 1, 0},
		{PeriodMonth, utc(2262, 1, 1, 0, 0), 12, 0}, // past the end of int64 nanoseconds
	} {
		if got := AdvancePeriods(c.p, c.end, c.n); got != c.want {
			t.Errorf("AdvancePeriods(%d, %d, %d) = %d, want %d", c.p, c.end, c.n, got, c.want)
		}
	}
}
