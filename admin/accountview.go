package admin

import (
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// accountView is the ledger's view of an account on the wire (GET
// /v1/accounts/{id}, every account change's response, and audit records):
// what the account is, and its money, once, in funds.
type accountView struct {
	ID               core.AccountID `json:"id"`
	Parent           *string        `json:"parent"`
	Capacity         string         `json:"capacity"`
	Unmetered        bool           `json:"unmetered"`
	Scope            string         `json:"scope"`
	Status           string         `json:"status"`
	Budget           budgetView     `json:"budget"`
	PolicyGeneration uint64         `json:"policy_generation"`
	PeriodStart      *string        `json:"period_start"`
	PeriodEnd        *string        `json:"period_end"`
	Funds            fundsView      `json:"funds"`
}

// fundsView is the account's money, in the words an owner asks in, each
// question answered once: what can it still spend, what is held in leases,
// what has it spent, what does it owe; then the rest of the ledger's books.
// Units in leases are taken from the ledger's balance the moment a node
// leases them (so the balance drops as soon as traffic starts), but while
// this node's shards hold them unspent they can still be spent: CanSpend
// counts them. The books balance:
//
//	received + owed == allowance_left + top_up_left + in_leases + spent + lost + expired
type fundsView struct {
	// CanSpend is what the account's own funds still allow: its balance
	// (allowance and top-ups left) and what this node's leases hold of it
	// unspent, less what it owes (a debt is repaid first).
	CanSpend core.CostUnits `json:"can_spend"`
	// HeldUnspent is what this node's leases hold for the account and have
	// not spent; null when the node does not say (then CanSpend is the
	// balance alone).
	HeldUnspent *core.CostUnits `json:"held_unspent"`
	// InLeases is everything granted to leases (of any node) and neither
	// billed nor returned yet: HeldUnspent, usage on its way to the
	// ledger, and other nodes' holdings.
	InLeases core.CostUnits `json:"in_leases"`
	Spent    core.CostUnits `json:"spent"` // billed usage
	// Owed is usage billed beyond the account's funds (elastic overage,
	// post-paid usage) and not yet repaid: the next funds to arrive repay
	// it first.
	Owed          core.CostUnits `json:"owed"`
	AllowanceLeft core.CostUnits `json:"allowance_left"` // this period's allowance neither leased nor spent
	TopUpLeft     core.CostUnits `json:"top_up_left"`    // deposits neither leased nor spent
	Lost          core.CostUnits `json:"lost"`           // forfeited by leases that ended without returning it
	Expired       core.CostUnits `json:"expired"`        // allowance left unspent at the end of a period
	// Received is every allowance and top-up the account was ever given.
	Received core.CostUnits `json:"received"`
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
		v.Funds.HeldUnspent = &held
		v.Funds.CanSpend = canSpend(a, held)
	}
	return v
}

// canSpend is a's balance and held, less its debt, at least 0. A debt
// beside a balance cannot be (a debt takes arriving funds first), so the
// debt is set against the units leases hold.
func canSpend(a *ledger.Account, held core.CostUnits) core.CostUnits {
	c, err := a.Balance().Add(held)
	if err != nil {
		c = core.MaxCostUnits
	}
	return c - min(c, a.Overage)
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
		Funds: fundsView{CanSpend: canSpend(a, 0), InLeases: a.Outstanding, Spent: a.Settled, Owed: a.Overage,
			AllowanceLeft: a.AllowanceLeft, TopUpLeft: a.TopUpLeft, Lost: a.Loss, Expired: a.Expired, Received: a.Deposited},
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
