package ledger

import (
	"errors"
	"fmt"
	"math"

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
// not fund) whenever limit can cover it. Zero when limit is zero.
func GrantSize(limit, want, need core.CostUnits) core.CostUnits {
	if limit == 0 {
		return 0
	}
	g := min(want, limit)
	if twice, err := want.Mul(2); err != nil || limit < twice {
		g = min(max(limit/2, 1), limit)
	}
	if need > g && need <= limit {
		g = need
	}
	return g
}

// EvidenceOf is what the ledger attests about the leaf of chain: the
// tightest scope's Balance + Outstanding (an upper bound on what the leaf
// can still spend, units already leased included), that scope, its
// PeriodEnd (0 without a period) and its budget Period. Ties go to the
// scope closest to the leaf.
func EvidenceOf(chain []*Account) (Evidence, error) {
	if len(chain) == 0 {
		return Evidence{}, fmt.Errorf("%w: empty funding chain", ErrInvalid)
	}
	ev := Evidence{Remaining: core.MaxCostUnits}
	for i, a := range chain {
		b, err := balance(a)
		if err != nil {
			return Evidence{}, err
		}
		r, err := b.Add(a.Outstanding)
		if err != nil {
			return Evidence{}, err
		}
		if i == 0 || r < ev.Remaining {
			ev = Evidence{Remaining: r, Scope: a.Scope, PeriodEnd: a.PeriodEnd, Period: a.Budget.Period}
		}
	}
	return ev, nil
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
// chain can fund it; see GrantSize) to the leaf an[0], usable for ttl from
// now, as lease id. want == 0, ttl <= 0 or an expiry past the end of time
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
// evidence is computed after the transition, for grants and refusals.
func Acquire(an Ancestry, id uint64, want, need core.CostUnits, ttl, now int64) (LeaseRecord, Evidence, error) {
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
			Lease: Lease{ID: id, Account: leaf.ID, Token: token, Granted: g,
				State: LeaseActive, GrantedAt: now, ExpiresAt: now + ttl},
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

// Consolidate releases rec (crediting unspent; see Release) and grants its
// replacement to the same account (see Acquire) as one transition over the
// accounts of an, the ancestry of rec's account; the new lease is id.
//
// The new grant is decided after the credit, so a consolidation can grow to
// need. If the new grant is refused, the release still happens and the
// refusal is returned with the evidence: returning unspent units is right
// whatever becomes of the replacement, and the holder must stop using the
// old lease either way. Any other error changes nothing, release included.
func Consolidate(rec *LeaseRecord, an Ancestry, token uint64, unspent, want, need core.CostUnits, ttl, now int64, id uint64) (LeaseRecord, Evidence, error) {
	if err := ValidateGrant(want, ttl, now); err != nil {
		return LeaseRecord{}, Evidence{}, err
	}
	if err := an.Validate(); err != nil {
		return LeaseRecord{}, Evidence{}, err
	}
	if an[0].ID != rec.Account {
		return LeaseRecord{}, Evidence{}, fmt.Errorf("%w: lease %d belongs to %s, not %s", ErrInvalid, rec.ID, rec.Account, an[0].ID)
	}
	funders, err := FundersIn(rec, an)
	if err != nil {
		return LeaseRecord{}, Evidence{}, err
	}
	saved := make([]Account, len(an))
	for i, a := range an {
		saved[i] = *a
	}
	savedLease := rec.Lease
	if err := Release(rec, funders, token, unspent, now); err != nil {
		return LeaseRecord{}, Evidence{}, err
	}
	next, ev, err := Acquire(an, id, want, need, ttl, now)
	if err != nil {
		if _, refused := errors.AsType[*Refusal](err); !refused {
			for i, a := range an {
				*a = saved[i]
			}
			rec.Lease = savedLease
		}
		return LeaseRecord{}, ev, err
	}
	return next, ev, nil
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
