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
	Funds            fundsView      `json:"funds"`
}

// fundsView says what the account's money is doing, in the words an
// account's owner asks in: what can I still spend, where is the rest?
// Units in leases are taken from the balance the moment a node leases them
// (so the balance alone drops as soon as traffic starts), but while this
// node's shards hold them unspent they are still spendable: available
// counts them.
type fundsView struct {
	// Available is what can still be spent: the balance plus HeldUnspent.
	Available core.CostUnits `json:"available"`
	// HeldUnspent is what this node's leases hold for the account and have
	// not spent; null when the node does not say (then Available is the
	// balance alone).
	HeldUnspent *core.CostUnits `json:"held_unspent"`
	// InLeases is everything granted to leases (of any node) and neither
	// billed nor returned yet: HeldUnspent, usage on its way to the
	// ledger, and other nodes' holdings.
	InLeases core.CostUnits `json:"in_leases"`
	Settled  core.CostUnits `json:"settled"` // billed usage
	Lost     core.CostUnits `json:"lost"`    // forfeited by leases that ended without returning it
	Expired  core.CostUnits `json:"expired"` // allowance left unspent at the end of a period
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

// Holdings reports, for an account, the units this node's leases hold and
// have not spent (the control plane knows: it slices leases to the
// shards). It is called from admin requests' goroutines, concurrently.
type Holdings interface {
	LeaseHoldings(core.AccountID) core.CostUnits
}

// viewAccount is the account as answered, with this node's holdings when
// the Server has a Holdings.
func (s *Server) viewAccount(a *ledger.Account) accountView {
	v := ledgerView(a)
	if s.holdings != nil {
		// Never more than the ledger says is in leases: a report beyond
		// it would count units twice.
		held := min(s.holdings.LeaseHoldings(a.ID), a.Outstanding)
		if avail, err := v.Funds.Available.Add(held); err == nil {
			v.Funds.Available, v.Funds.HeldUnspent = avail, &held
		}
	}
	return v
}

// ledgerView is the ledger's view of an account alone: what audit records
// store (a node's holdings change by the millisecond and are not the
// ledger's state).
func ledgerView(a *ledger.Account) accountView {
	v := accountView{
		ID: a.ID, Capacity: capacityName(a.Capacity), Unmetered: a.Unmetered,
		Scope: scopeName(a.Scope), Status: a.Status.String(),
		Budget:           budgetView{Allowance: a.Budget.Allowance, Period: periodName(a.Budget.Period)},
		PolicyGeneration: a.PolicyGeneration,
		Balance:          a.Balance(), AllowanceLeft: a.AllowanceLeft, TopUpLeft: a.TopUpLeft,
		Outstanding: a.Outstanding, Settled: a.Settled, Loss: a.Loss, Expired: a.Expired,
		Deposited: a.Deposited, Overage: a.Overage,
		Funds: fundsView{Available: a.Balance(), InLeases: a.Outstanding, Settled: a.Settled, Lost: a.Loss, Expired: a.Expired},
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
