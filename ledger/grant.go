package ledger

import (
	"fmt"
	"math"
	"slices"

	"github.com/tollgated/tollgated/core"
)

// Funding is what one lease took from one account of its funding chain:
// Allowance units from AllowanceLeft during the period that started at
// PeriodStart, and TopUp units from TopUpLeft. Allowance + TopUp equals the
// lease's Granted: every chain account funds the whole grant.
type Funding struct {
	Account     core.AccountID
	Allowance   core.CostUnits
	TopUp       core.CostUnits
	PeriodStart int64
}

// LeaseRecord is a lease as the store keeps it: the lease and one Funding
// per account of its funding chain at grant time, leaf first. The chain of
// an account never changes (parents and metering are fixed at creation),
// so the funders of a lease are always its account's current chain.
type LeaseRecord struct {
	Lease
	Funding []Funding
}

// Capacity returns the largest grant chain can fund, the smallest Balance
// in it, and the index of the account closest to the leaf that has it.
func Capacity(chain []*Account) (limit core.CostUnits, at int, err error) {
	limit = core.MaxCostUnits
	for i, a := range chain {
		b, err := balance(a)
		if err != nil {
			return 0, 0, err
		}
		if b < limit {
			limit, at = b, i
		}
	}
	return limit, at, nil
}

// GrantSize decides how much to grant from a chain whose capacity is limit:
// want, but only half of what is left once the balance is near exhaustion
// (limit < 2*want), so several holders can still be funded; at least 1
// unit; never more than limit; and need (the largest quote a holder could
// not fund) whenever limit can cover it — all of limit when it cannot:
// halves of a remainder smaller than the quotes waiting for it would split
// it into pieces no request fits, holder after holder, so the last units
// go whole to one holder (and from it to another that asks, docs/FLEET.md).
// Zero when limit is zero.
func GrantSize(limit, want, need core.CostUnits) core.CostUnits {
	if limit == 0 {
		return 0
	}
	g := min(want, limit)
	if twice, err := want.Mul(2); err != nil || limit < twice {
		g = min(max(limit/2, 1), limit)
	}
	if need > g {
		g = min(need, limit)
	}
	return g
}

// EvidenceOf is what the ledger attests about the leaf of chain (see
// core.FundingEvidence): the smallest Spendable of its scopes (an upper
// bound on what the leaf can still spend, units already leased included,
// debt paid first); when rollovers alone can first raise it (ResetAt: the
// latest reset of the scopes at that smallest amount, 0 for never); the
// smallest SpendableAt of the scopes once each has rolled over at ResetAt
// (Next); the Ceiling, the least of the scopes' most they can hold again
// without new money; and the binding scope — of the scopes at the
// smallest amount, the one whose reset comes last (never is last), ties to
// the scope closest to the leaf — with its PeriodEnd (0 without a period)
// and budget Period.
func EvidenceOf(chain []*Account) (Evidence, error) {
	if len(chain) == 0 {
		return Evidence{}, fmt.Errorf("%w: empty funding chain", ErrInvalid)
	}
	ev := Evidence{Remaining: core.MaxCostUnits, Ceiling: core.MaxCostUnits}
	for i, a := range chain {
		r, err := Spendable(a)
		if err != nil {
			return Evidence{}, err
		}
		reset := ResetOf(a, r)
		if i == 0 || r < ev.Remaining || r == ev.Remaining && later(reset, ev.ResetAt) {
			ev = Evidence{Remaining: r, ResetAt: reset, Scope: a.Scope, PeriodEnd: a.PeriodEnd, Period: a.Budget.Period, Ceiling: ev.Ceiling}
		}
		ev.Ceiling = min(ev.Ceiling, CeilingOf(a, r))
	}
	ev.Next = ev.Remaining
	if ev.ResetAt != 0 {
		ev.Next = core.MaxCostUnits
		for _, a := range chain {
			s, err := SpendableAt(a, ev.ResetAt)
			if err != nil {
				return Evidence{}, err
			}
			ev.Next = min(ev.Next, s)
		}
	}
	return ev, nil
}

// later reports whether reset a comes after b, where 0 is never (after
// every time).
func later(a, b int64) bool { return b != 0 && (a == 0 || a > b) }

// ResetOf is when rollovers alone first let a spend more than spendable
// (its Spendable): 0 for never — a without a periodic allowance, or a debt
// that outlasts every time the evidence can name. A scope with something
// left can spend more at its period's end, when the allowance left is
// topped up to a whole one. An exhausted scope owes its deficit — its debt
// beyond what it holds and has out in leases — and each period's
// allowance repays that first: it can spend again at the end of the
// period in which the allowances deposited so far exceed the deficit.
// That assumes each period is rolled over (the daemon's maintenance rolls
// every account at each boundary; a period nobody rolls deposits nothing).
func ResetOf(a *Account, spendable core.CostUnits) int64 {
	if a.Budget.Period == PeriodNone || a.Budget.Allowance == 0 || a.PeriodEnd == 0 {
		return 0
	}
	if spendable > 0 {
		return a.PeriodEnd
	}
	held := a.Balance() + a.Outstanding // no overflow: Spendable computed it
	deficit := a.Overage - min(a.Overage, held)
	return AdvancePeriods(a.Budget.Period, a.PeriodEnd, uint64(deficit/a.Budget.Allowance))
}

// SpendableAt is what a can spend at t once it has rolled over at every
// boundary of its period up to t (each repaying debt first, as RollOver
// does, the allowance left of the period before expiring), assuming
// nothing else happens meanwhile: its Spendable when no boundary of its
// comes by t.
func SpendableAt(a *Account, t int64) (core.CostUnits, error) {
	n := periodsUpTo(a, t)
	if n == 0 {
		return Spendable(a)
	}
	// n deposits of one allowance repay the debt first; the last one's
	// rest is the allowance left, the earlier ones' rest expired.
	allowance := a.Budget.Allowance
	before := a.Overage // the debt before the last deposit
	if repaid, err := allowance.Mul(n - 1); err == nil {
		before -= min(before, repaid)
	} else {
		before = 0
	}
	left := allowance - min(allowance, before)
	debt := before - min(before, allowance)
	held, err := left.Add(a.TopUpLeft)
	if err == nil {
		held, err = held.Add(a.Outstanding)
	}
	if err != nil {
		return 0, err
	}
	return held - min(held, debt), nil
}

// periodsUpTo is how many of a's period boundaries lie in [a.PeriodEnd, t]:
// the rollovers a makes by t.
func periodsUpTo(a *Account, t int64) uint64 {
	if a.Budget.Period == PeriodNone || a.Budget.Allowance == 0 || a.PeriodEnd == 0 || t < a.PeriodEnd {
		return 0
	}
	return PeriodsBetween(a.Budget.Period, a.PeriodEnd, t) + 1
}

// CeilingOf is the most a could hold to spend again without new money,
// whatever number of periods pass: with a periodic allowance, one whole
// allowance besides its top-ups left and the units out in its leases (a
// debt only lowers that, until it is repaid); without, what it can spend
// now.
func CeilingOf(a *Account, spendable core.CostUnits) core.CostUnits {
	if a.Budget.Period == PeriodNone || a.Budget.Allowance == 0 {
		return spendable
	}
	c, err := a.Budget.Allowance.Add(a.TopUpLeft)
	if err == nil {
		c, err = c.Add(a.Outstanding)
	}
	if err != nil {
		return core.MaxCostUnits
	}
	return c
}

// Spendable is what a alone can still spend: its balance and the units
// out in its leases, less its debt, at least 0. A debt is paid from the
// units still out in leases before any of them may be spent again (a
// release repays it first), so what the scope can spend is what it holds
// less what it owes. Grants and releases move units between balance and
// leases and leave it alone; usage, forfeits, deposits, budgets and
// rollovers move it — and with it the funding evidence of a's subtree.
func Spendable(a *Account) (core.CostUnits, error) {
	b, err := balance(a)
	if err != nil {
		return 0, err
	}
	r, err := b.Add(a.Outstanding)
	if err != nil {
		return 0, err
	}
	return r - min(r, a.Overage), nil
}

// ValidateGrant refuses grant arguments no grant accepts (ErrInvalid):
// nothing wanted, a ttl that is not positive, or an expiry now+ttl past
// the end of time. Stores call it before touching anything, so bad
// arguments are ErrInvalid even for an unknown account or lease.
func ValidateGrant(want core.CostUnits, ttl, now int64) error {
	if want == 0 || ttl <= 0 || now > math.MaxInt64-ttl {
		return fmt.Errorf("%w: want %d, ttl %d at %d", ErrInvalid, want, ttl, now)
	}
	return nil
}

// Acquire decides and applies a grant of up to want units (need when the
// chain can fund it; see GrantSize) to the leaf an[0], held by holder and
// usable for ttl from now, as lease id. want == 0, ttl <= 0 or an expiry past the end of time
// is ErrInvalid.
//
// First every chain account is rolled over to now, so no grant spends an
// allowance past its period. Then: if the leaf or any ancestor is not
// active, the answer is a *Refusal{RefusedInactive} naming the one closest
// to the leaf; if some chain account's Balance is 0, a
// *Refusal{RefusedExhausted} naming the one closest to the leaf. A refusal
// changes nothing (not even the rollover, which the next call repeats).
// Otherwise every chain account pays the grant, allowance first, and holds
// it as Outstanding; the lease takes the leaf's next fencing token. The
// evidence is computed after the transition, for grants and refusals. The
// lease keeps NoGrace: the store sets the holder's (GraceOf).
func Acquire(an Ancestry, id uint64, holder string, want, need core.CostUnits, ttl, now int64) (LeaseRecord, Evidence, error) {
	if err := ValidateGrant(want, ttl, now); err != nil {
		return LeaseRecord{}, Evidence{}, err
	}
	if err := an.Validate(); err != nil {
		return LeaseRecord{}, Evidence{}, err
	}
	leaf := an[0]
	accts := an.Chain()
	off := 0
	if leaf.Unmetered {
		accts = append([]*Account{leaf}, accts...)
		off = 1
	}
	var rec LeaseRecord
	var ev Evidence
	err := transact(accts, func(n []Account) error {
		chain := make([]*Account, 0, len(n)-off)
		for i := off; i < len(n); i++ {
			if _, err := RollOver(&n[i], now); err != nil {
				return err
			}
			chain = append(chain, &n[i])
		}
		var err error
		if ev, err = EvidenceOf(chain); err != nil {
			return err
		}
		if in := an.Inactive(); in != nil {
			return &Refusal{Reason: RefusedInactive, Account: in.ID, Evidence: ev}
		}
		limit, at, err := Capacity(chain)
		if err != nil {
			return err
		}
		if limit == 0 {
			return &Refusal{Reason: RefusedExhausted, Account: chain[at].ID, Evidence: ev}
		}
		g := GrantSize(limit, want, need)
		token := n[0].NextToken
		if token == math.MaxUint64 {
			return fmt.Errorf("%w: fencing tokens of %s", ErrOverflow, leaf.ID)
		}
		n[0].NextToken++
		rec = LeaseRecord{
			Lease: Lease{ID: id, Account: leaf.ID, Holder: holder, Token: token, Granted: g,
				State: LeaseActive, GrantedAt: now, ExpiresAt: now + ttl, Grace: NoGrace},
			Funding: make([]Funding, len(chain)),
		}
		for i, a := range chain {
			if rec.Funding[i], err = debit(a, g); err != nil {
				return err
			}
		}
		ev, err = EvidenceOf(chain)
		return err
	})
	if err != nil {
		return LeaseRecord{}, ev, err
	}
	return rec, ev, nil
}

// ValidateExtend refuses extension arguments no extension accepts
// (ErrInvalid): a ttl that is not positive or an expiry past the end of
// time. want may be zero: an extension that only moves the expiry.
func ValidateExtend(ttl, now int64) error {
	if ttl <= 0 || now > math.MaxInt64-ttl {
		return fmt.Errorf("%w: ttl %d at %d", ErrInvalid, ttl, now)
	}
	return nil
}

// Extend grows the active lease rec (fencing token token) by up to want
// more units — need when the chain can fund it, see GrantSize; nothing
// when it can fund nothing, which is not an error — and moves its expiry
// to now+ttl; an is the ancestry of rec's account. It is how a busy holder
// keeps one lease for as long as it is busy, one transaction per renewal,
// instead of acquiring and releasing a lease each time.
//
// Every chain account is rolled over to now first. If one of them moved to
// a new budget period since the lease was granted, the answer is
// ErrPeriodEnded and nothing changes: allowance of two periods must not
// mix in one lease (a release returns a lease's allowance only to the
// period it came from), so the holder acquires a successor instead. A
// suspended or closed chain is a *Refusal{RefusedInactive} and changes
// nothing. The evidence is computed after the transition.
func Extend(rec *LeaseRecord, an Ancestry, token uint64, want, need core.CostUnits, ttl, now int64) (Evidence, error) {
	if err := ValidateExtend(ttl, now); err != nil {
		return Evidence{}, err
	}
	if err := an.Validate(); err != nil {
		return Evidence{}, err
	}
	if an[0].ID != rec.Account {
		return Evidence{}, fmt.Errorf("%w: lease %d belongs to %s, not %s", ErrInvalid, rec.ID, rec.Account, an[0].ID)
	}
	if rec.State != LeaseActive {
		return Evidence{}, fmt.Errorf("%w: lease %d", ErrLeaseNotActive, rec.ID)
	}
	if token != rec.Token {
		return Evidence{}, fmt.Errorf("%w: lease %d has token %d, not %d", ErrFenced, rec.ID, rec.Token, token)
	}
	funders, err := FundersIn(rec, an)
	if err != nil {
		return Evidence{}, err
	}
	if err := matchFunders(rec, funders); err != nil {
		return Evidence{}, err
	}
	var ev Evidence
	funding := slices.Clone(rec.Funding)
	var granted core.CostUnits
	err = transact(funders, func(n []Account) error {
		chain := make([]*Account, len(n))
		for i := range n {
			if _, err := RollOver(&n[i], now); err != nil {
				return err
			}
			if n[i].PeriodStart != funding[i].PeriodStart {
				return fmt.Errorf("%w: %s is in the period from %d, lease %d was funded in the one from %d",
					ErrPeriodEnded, n[i].ID, n[i].PeriodStart, rec.ID, funding[i].PeriodStart)
			}
			chain[i] = &n[i]
		}
		var err error
		if ev, err = EvidenceOf(chain); err != nil {
			return err
		}
		if in := an.Inactive(); in != nil {
			return &Refusal{Reason: RefusedInactive, Account: in.ID, Evidence: ev}
		}
		if want > 0 {
			limit, _, err := Capacity(chain)
			if err != nil {
				return err
			}
			granted = GrantSize(limit, want, need)
		}
		for i, a := range chain {
			f, err := debit(a, granted)
			if err != nil {
				return err
			}
			if funding[i].Allowance, err = funding[i].Allowance.Add(f.Allowance); err != nil {
				return err
			}
			if funding[i].TopUp, err = funding[i].TopUp.Add(f.TopUp); err != nil {
				return err
			}
		}
		ev, err = EvidenceOf(chain)
		return err
	})
	if err != nil {
		return ev, err
	}
	total, err := rec.Granted.Add(granted)
	if err != nil {
		return ev, err
	}
	rec.Granted, rec.ExpiresAt, rec.Funding = total, now+ttl, funding
	return ev, nil
}

// debit takes g from a, allowance first, and holds it as Outstanding.
func debit(a *Account, g core.CostUnits) (Funding, error) {
	f := Funding{Account: a.ID, Allowance: min(g, a.AllowanceLeft), PeriodStart: a.PeriodStart}
	f.TopUp = g - f.Allowance
	if err := subFrom(&a.AllowanceLeft, f.Allowance); err != nil {
		return Funding{}, err
	}
	if err := subFrom(&a.TopUpLeft, f.TopUp); err != nil {
		return Funding{}, err
	}
	return f, addAll(g, &a.Outstanding)
}

// balance is Account.Balance, checked.
func balance(a *Account) (core.CostUnits, error) { return a.AllowanceLeft.Add(a.TopUpLeft) }
