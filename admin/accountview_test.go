package admin

import (
	"encoding/json"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

func TestViewAccount(t *testing.T) {
	a := ledger.Account{
		AccountSpec: ledger.AccountSpec{ID: "ag", Parent: "ws", Capacity: core.CapacityBestEffort},
		Scope:       core.ScopeAgent, Status: core.StatusSuspended, PolicyGeneration: 9,
		Budget:    ledger.Budget{Allowance: 10, Period: ledger.PeriodMonth},
		Deposited: 30, AllowanceLeft: 4, TopUpLeft: 6, Outstanding: 5, Settled: 15,
		PeriodStart: startNs, PeriodEnd: startNs + 1,
	}
	v := ledgerView(&a)
	if *v.Parent != "ws" || v.Scope != "agent" || v.Status != "suspended" || v.Capacity != "best_effort" ||
		v.Funds != (fundsView{CanSpend: 10, InLeases: 5, Spent: 15, AllowanceLeft: 4, TopUpLeft: 6, Received: 30}) || v.Budget.Period != "month" || *v.PeriodStart != "2026-06-27T08:00:00Z" ||
		*v.PeriodEnd != "2026-06-27T08:00:00.000000001Z" {
		t.Fatalf("%+v", v)
	}
	b, _ := json.Marshal(ledgerView(&ledger.Account{AccountSpec: ledger.AccountSpec{ID: "root"}}))
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["parent"] != nil || m["period_start"] != nil || m["period_end"] != nil {
		t.Fatalf("a root without a period must show nulls: %s", b)
	}
}

// TestFundsAnswerEachQuestionOnce: can_spend sets the debt against what
// leases hold; the books balance in the view's own words.
func TestFundsAnswerEachQuestionOnce(t *testing.T) {
	a := ledger.Account{AccountSpec: ledger.AccountSpec{ID: "ag"}, Deposited: 100, Overage: 30, Outstanding: 50, Settled: 80}
	if err := a.Conserved(); err != nil {
		t.Fatal(err)
	}
	if v := ledgerView(&a); v.Funds.CanSpend != 0 || v.Funds.Owed != 30 || v.Funds.InLeases != 50 {
		t.Fatalf("a debtor: %+v", v.Funds)
	}
	s := &Server{holdings: holdings{"ag": 45}}
	f := s.viewAccount(&a).Funds
	if f.CanSpend != 15 || *f.HeldUnspent != 45 {
		t.Fatalf("a debtor's node holding 45: %+v", f)
	}
	if f.Received+f.Owed != f.AllowanceLeft+f.TopUpLeft+f.InLeases+f.Spent+f.Lost+f.Expired {
		t.Fatalf("the books do not balance: %+v", f)
	}
}

func TestNamesOfUnknownValues(t *testing.T) {
	// Values a newer ledger might store must not panic or look valid.
	if scopeName(core.ScopeNone) != "none" || scopeName(core.Scope(9)) != "none" {
		t.Fatal("scope")
	}
	if periodName(ledger.Period(9)) != "unknown" {
		t.Fatal("period")
	}
	if capacityName(core.CapacityAssured) != "assured" {
		t.Fatal("capacity")
	}
}
