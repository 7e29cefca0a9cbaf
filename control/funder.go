package control

import (
	"errors"
	"sync"

	"github.com/tollgated/tollgated/core"
)

// Grant is funding a Funder hands out: units of the account's node lease
// (fencing token Token), usable until Until, with the ledger's evidence
// about what the account can still spend (Remaining includes units held in
// leases) when the funder can attest it.
type Grant struct {
	Token       uint64
	Units       core.CostUnits
	Until       int64
	Evidence    core.FundingEvidence
	HasEvidence bool
}

// Funder is the source of funding behind the control plane: the ledger.
// Calls come only from the control plane goroutine.
type Funder interface {
	// Grant asks for want units for account (need: the largest quote a
	// shard refused, which a grant should cover when the balance can). A
	// grant of zero units with evidence means the account cannot fund more.
	Grant(account core.AccountID, want, need core.CostUnits, now int64) (Grant, error)
	// Return gives back units a shard did not spend from lease token.
	Return(account core.AccountID, token uint64, units core.CostUnits)
	// Settle records billed usage against the lease that funded it.
	Settle(ev *core.UsageEvent)
}

// UsageSink receives billed usage. Record must not block the control plane
// for long. The daemon keeps usage durable through the plane's Spool instead;
// a sink is for tests and embedders that keep usage themselves.
type UsageSink interface {
	Record(ev *core.UsageEvent)
}

// MemoryFunder is an in-memory Funder for tests and for running without a
// ledger: each account has a balance, one lease token, and a TTL.
type MemoryFunder struct {
	mu       sync.Mutex
	balances map[core.AccountID]*memAccount
	TTL      int64 // lease usable window, ns
}

type memAccount struct {
	balance, granted, returned, spent core.CostUnits
	token                             uint64
	scope                             core.Scope
}

// NewMemoryFunder returns a funder with no accounts.
func NewMemoryFunder(ttl int64) *MemoryFunder {
	return &MemoryFunder{balances: make(map[core.AccountID]*memAccount), TTL: ttl}
}

// Deposit adds units to account's balance.
func (f *MemoryFunder) Deposit(account core.AccountID, units core.CostUnits, scope core.Scope) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.balances[account]
	if a == nil {
		a = &memAccount{token: 1, scope: scope}
		f.balances[account] = a
	}
	b, err := a.balance.Add(units)
	if err != nil {
		return err
	}
	a.balance = b
	return nil
}

// ErrUnknownAccount is returned for an account with no balance record.
var ErrUnknownAccount = errors.New("control: unknown account")

// Grant implements Funder.
func (f *MemoryFunder) Grant(account core.AccountID, want, need core.CostUnits, now int64) (Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.balances[account]
	if a == nil {
		return Grant{}, ErrUnknownAccount
	}
	// Halve grants near exhaustion so one shard cannot hoard a small
	// balance, but grow to a refused quote the balance can fund.
	units := min(want, max(a.balance/2, 1), a.balance)
	if need > units && need <= a.balance {
		units = need
	}
	a.balance -= units
	a.granted += units
	return Grant{
		Token: a.token, Units: units, Until: now + f.TTL,
		Evidence:    core.FundingEvidence{Remaining: a.balance + a.outstanding(), Scope: a.scope},
		HasEvidence: true,
	}, nil
}

func (a *memAccount) outstanding() core.CostUnits { return a.granted - a.returned - a.spent }

// Return implements Funder.
func (f *MemoryFunder) Return(account core.AccountID, token uint64, units core.CostUnits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.balances[account]; a != nil {
		a.balance += units
		a.returned += units
	}
}

// Settle implements Funder.
func (f *MemoryFunder) Settle(ev *core.UsageEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.balances[ev.Account()]; a != nil && ev.Source == core.SourceLease {
		a.spent += ev.Units
	}
}

// Balance reports account's unleased balance and the units out in leases
// (granted, less returned and spent).
func (f *MemoryFunder) Balance(account core.AccountID) (balance, outstanding core.CostUnits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.balances[account]; a != nil {
		return a.balance, a.outstanding()
	}
	return 0, 0
}

// MemoryUsage is an in-memory UsageSink that keeps every event.
type MemoryUsage struct {
	mu     sync.Mutex
	events []core.UsageEvent
}

// Record implements UsageSink.
func (m *MemoryUsage) Record(ev *core.UsageEvent) {
	m.mu.Lock()
	m.events = append(m.events, *ev)
	m.mu.Unlock()
}

// Events returns a copy of what was recorded.
func (m *MemoryUsage) Events() []core.UsageEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]core.UsageEvent(nil), m.events...)
}
