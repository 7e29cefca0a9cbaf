package admin

import (
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// accountView is the ledger's view of an account on the wire (GET
// /v1/accounts/{id}, every account change's response, and audit records).
type accountView struct {
	ID               core.AccountID `json:"id"`
	Parent           *string        `json:"parent"`
	Capacity         string         `json:"capacity"`
	Unmetered        bool           `json:"unmetered"`
	Scope            string         `json:"scope"`
	Status           string         `json:"status"`
	Budget           budgetView     `json:"budget"`
	PolicyGeneration uint64         `json:"policy_generation"`
	Balance          core.CostUnits `json:"balance"`
	AllowanceLeft    core.CostUnits `json:"allowance_left"`
	TopUpLeft        core.CostUnits `json:"top_up_left"`
	Outstanding      core.CostUnits `json:"outstanding"`
	Settled          core.CostUnits `json:"settled"`
	Loss             core.CostUnits `json:"loss"`
	Expired          core.CostUnits `json:"expired"`
	Deposited        core.CostUnits `json:"deposited"`
	Overage          core.CostUnits `json:"overage"`
	PeriodStart      *string        `json:"period_start"`
	PeriodEnd        *string        `json:"period_end"`
}

type budgetView struct {
	Allowance core.CostUnits `json:"allowance"`
	Period    string         `json:"period"`
}

// accountResponse is an account change's answer: the new state and what,
// if anything, failed after it was stored.
type accountResponse struct {
	accountView
	followUp
}

func viewAccount(a *ledger.Account) accountView {
	v := accountView{
		ID: a.ID, Capacity: capacityName(a.Capacity), Unmetered: a.Unmetered,
		Scope: scopeName(a.Scope), Status: a.Status.String(),
		Budget:           budgetView{Allowance: a.Budget.Allowance, Period: periodName(a.Budget.Period)},
		PolicyGeneration: a.PolicyGeneration,
		Balance:          a.Balance(), AllowanceLeft: a.AllowanceLeft, TopUpLeft: a.TopUpLeft,
		Outstanding: a.Outstanding, Settled: a.Settled, Loss: a.Loss, Expired: a.Expired,
		Deposited: a.Deposited, Overage: a.Overage,
	}
	if a.Parent != "" {
		p := string(a.Parent)
		v.Parent = &p
	}
	// Both bounds are 0 when the budget has no period: null, never "" or
	// 1970, which a client could mistake for a real time.
	if a.PeriodStart != 0 || a.PeriodEnd != 0 {
		v.PeriodStart, v.PeriodEnd = timestamp(a.PeriodStart), timestamp(a.PeriodEnd)
	}
	return v
}

// timestamp is ns as RFC 3339 in UTC.
func timestamp(ns int64) *string {
	t := time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	return &t
}

func capacityName(c core.CapacityClass) string {
	if c == core.CapacityBestEffort {
		return "best_effort"
	}
	return "assured"
}

func scopeName(s core.Scope) string {
	if s >= core.ScopeAgent && s <= core.ScopeOrg {
		return s.String()
	}
	return "none"
}

var periodNames = map[ledger.Period]string{
	ledger.PeriodNone: "none", ledger.PeriodDay: "day", ledger.PeriodWeek: "week", ledger.PeriodMonth: "month",
}

func periodName(p ledger.Period) string {
	if n, ok := periodNames[p]; ok {
		return n
	}
	return "unknown"
}
