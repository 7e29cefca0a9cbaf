package ledger

// The money rules. Every backend applies the same transitions: these pure
// functions over *Account values (and LeaseRecord values, in grant.go and
// settle.go) are the only code that moves units, so the bbolt store and any
// later backend cannot disagree about them. They read no clock: time is an
// argument.
//
// Every rule is all-or-nothing: it computes on copies with checked
// arithmetic and writes its results back only when every step succeeded
// and every account it touched still satisfies L1 (Account.Conserved, which
// also proves that neither side of the equation overflows). A rule that
// returns an error has changed nothing. A *Refusal is not a failure of the
// rule: it is the rule's answer, and it, too, has changed nothing.
//
// Decisions the rules make, beyond the Store interface's comments:
//
//   - Scope is derived from depth: a root is an org, its child a workspace,
//     a workspace's child an agent; agents have no children. Roots must be
//     metered. An account's funding chain is itself (if metered) and every
//     metered ancestor; every charge debits all of them or none.
//   - Unmetered accounts hold no money: a budget or deposit for one is
//     ErrInvalid. A budget with an allowance but PeriodNone is ErrInvalid.
//   - Closing an account is terminal and ends its budget: the allowance
//     left expires and no allowance is ever deposited again.
//   - Rollover is lazy as well as periodic: a grant, a release and a
//     post-paid charge first roll the accounts they touch into the period
//     containing now, so no allowance is spent or credited past its period.
//     The store's Rollover then finds those accounts not due.
//   - Within a lease, usage is counted against its allowance part first;
//     a release credits what is unspent to the allowance part still left
//     first, then to top-ups, and any gap is Loss. Returned allowance goes
//     back only into the period it came from and never above the budget's
//     Allowance (L5); the rest is Expired (this matters after a mid-period
//     budget change).
//   - Acquire never refuses because need exceeds what is left: it grants
//     what GrantSize allows (RefusedInsufficient is not produced here).
//   - A consolidation whose replacement is refused still releases.
//   - Loss is provisional: late usage of an ended lease converts it back to
//     Settled, up to Granted − Used − Credited.

import (
	"bytes"
	"fmt"

	"github.com/tollgated/tollgated/core"
)

// ScopeUnder returns the scope of a new account whose parent is parent (nil
// for a root): a root is an org, an org's child a workspace, a workspace's
// child an agent. Agents have no children (ErrInvalid).
func ScopeUnder(parent *Account) (core.Scope, error) {
	if parent == nil {
		return core.ScopeOrg, nil
	}
	switch parent.Scope {
	case core.ScopeOrg:
		return core.ScopeWorkspace, nil
	case core.ScopeWorkspace:
		return core.ScopeAgent, nil
	}
	return core.ScopeNone, fmt.Errorf("%w: %s is an agent (or has no scope) and cannot have children", ErrInvalid, parent.ID)
}

// ValidateSpec checks what can be checked about spec without the store:
// well-formed ids, a known capacity class, a metered root, no self-parent.
func ValidateSpec(spec AccountSpec) error {
	if err := spec.ID.Validate(); err != nil {
		return fmt.Errorf("%w: account %q: %w", ErrInvalid, spec.ID, err)
	}
	if spec.Parent != "" {
		if err := spec.Parent.Validate(); err != nil {
			return fmt.Errorf("%w: parent %q: %w", ErrInvalid, spec.Parent, err)
		}
		if spec.Parent == spec.ID {
			return fmt.Errorf("%w: account %s cannot be its own parent", ErrInvalid, spec.ID)
		}
	} else if spec.Unmetered {
		// Every charge must be bounded by at least one balance.
		return fmt.Errorf("%w: root account %s must be metered", ErrInvalid, spec.ID)
	}
	if spec.Capacity > core.CapacityBestEffort {
		return fmt.Errorf("%w: unknown capacity class %d", ErrInvalid, spec.Capacity)
	}
	return nil
}

// NewAccount returns the account spec creates under parent (nil for a
// root; otherwise the account named by spec.Parent): active, policy
// generation 1, first fencing token 1, no money, no budget.
func NewAccount(spec AccountSpec, parent *Account) (Account, error) {
	if err := ValidateSpec(spec); err != nil {
		return Account{}, err
	}
	if (parent == nil) != (spec.Parent == "") || (parent != nil && parent.ID != spec.Parent) {
		return Account{}, fmt.Errorf("%w: parent of %s does not match its spec", ErrInvalid, spec.ID)
	}
	scope, err := ScopeUnder(parent)
	if err != nil {
		return Account{}, err
	}
	return Account{AccountSpec: spec, Scope: scope, Status: core.StatusActive, PolicyGeneration: 1, NextToken: 1}, nil
}

// ChangeStatus sets a's status. The same status again is a no-op
// (changed=false, no generation bump); Closed is terminal (leaving it is
// ErrClosedAccount). Every real change bumps PolicyGeneration.
//
// Closing also ends the budget: the allowance left moves to Expired and the
// budget becomes PeriodNone, so a closed account never receives another
// allowance (top-ups stay where they are, for the operator to refund).
func ChangeStatus(a *Account, s core.Status) (changed bool, err error) {
	if s > core.StatusClosed {
		return false, fmt.Errorf("%w: unknown status %d", ErrInvalid, s)
	}
	if a.Status == s {
		return false, nil
	}
	if a.Status == core.StatusClosed {
		return false, fmt.Errorf("%w: %s cannot become %s", ErrClosedAccount, a.ID, s)
	}
	err = transact([]*Account{a}, func(n []Account) error {
		if err := bumpGeneration(&n[0]); err != nil {
			return err
		}
		n[0].Status = s
		if s == core.StatusClosed {
			if err := expireAllowance(&n[0]); err != nil {
				return err
			}
			n[0].Budget = Budget{}
			n[0].PeriodStart, n[0].PeriodEnd = 0, 0
		}
		return nil
	})
	return err == nil, err
}

// ChangePolicy stores policy verbatim (the ledger never interprets it) and
// bumps PolicyGeneration; the same bytes again are a no-op.
func ChangePolicy(a *Account, policy []byte) (changed bool, err error) {
	if bytes.Equal(a.Policy, policy) {
		return false, nil
	}
	n := *a
	if err := bumpGeneration(&n); err != nil {
		return false, err
	}
	n.Policy = bytes.Clone(policy)
	*a = n
	return true, nil
}

// ValidateBudget refuses budgets that cannot be kept: an unknown period,
// or an allowance without a period (PeriodNone means top-ups only).
func ValidateBudget(b Budget) error {
	if b.Period > PeriodMonth {
		return fmt.Errorf("%w: unknown budget period %d", ErrInvalid, b.Period)
	}
	if b.Period == PeriodNone && b.Allowance != 0 {
		return fmt.Errorf("%w: an allowance needs a period", ErrInvalid)
	}
	return nil
}

// ChangeBudget sets a's budget at time now. The same budget again is a
// no-op. Otherwise the allowance left expires, the period containing now
// starts (no bounds for PeriodNone) and one new allowance is deposited.
// Unmetered accounts hold no money (ErrInvalid); closed accounts take no
// budget (ErrClosedAccount).
//
// Allowance still held by leases granted under the old budget comes back
// (Release) into the new allowance only while the period is the same and
// never above the new Allowance (see Release); the rest expires.
func ChangeBudget(a *Account, b Budget, now int64) (changed bool, err error) {
	if err := ValidateBudget(b); err != nil {
		return false, err
	}
	if err := holdsMoney(a); err != nil {
		return false, err
	}
	if a.Budget == b {
		return false, nil
	}
	err = transact([]*Account{a}, func(n []Account) error {
		if err := expireAllowance(&n[0]); err != nil {
			return err
		}
		n[0].Budget = b
		n[0].PeriodStart, n[0].PeriodEnd = PeriodBounds(b.Period, now)
		return depositAllowance(&n[0])
	})
	return err == nil, err
}

// RollOver moves a into the period containing now if its period has ended
// (now >= PeriodEnd): the allowance left expires and exactly one new
// allowance is deposited, however many boundaries passed (no backlog). It
// reports whether it moved a; calling it again at the same or an earlier
// time moves nothing, which is what makes rollover exactly-once per
// boundary under a serializing transaction.
func RollOver(a *Account, now int64) (moved bool, err error) {
	if a.Budget.Period == PeriodNone || now < a.PeriodEnd {
		return false, nil
	}
	start, end := PeriodBounds(a.Budget.Period, now)
	if start == a.PeriodStart { // only at the saturated end of time
		return false, nil
	}
	err = transact([]*Account{a}, func(n []Account) error {
		if err := expireAllowance(&n[0]); err != nil {
			return err
		}
		n[0].PeriodStart, n[0].PeriodEnd = start, end
		return depositAllowance(&n[0])
	})
	return err == nil, err
}

// TopUp deposits units of top-up into a: TopUpLeft and Deposited grow by
// units. Top-ups never expire. Idempotency by key is the store's business.
func TopUp(a *Account, units core.CostUnits) error {
	if units == 0 {
		return fmt.Errorf("%w: a deposit must be positive", ErrInvalid)
	}
	if err := holdsMoney(a); err != nil {
		return err
	}
	return transact([]*Account{a}, func(n []Account) error {
		if err := addAll(units, &n[0].Deposited); err != nil {
			return err
		}
		return Repay(&n[0], &n[0].TopUpLeft, units)
	})
}

// Repay adds units arriving into the balance field to (AllowanceLeft or
// TopUpLeft), after paying off as much of a's debt (Overage) as they can:
// an account that ran post-paid or elastic usage past its funding pays for
// it out of the next funds it receives — a deposit, a new period's
// allowance, units a released lease gives back — before any of them can be
// spent again. L1 holds: of the units arriving, r repay debt (Overage, on
// the left of L1, shrinks by r) and the rest reach the field (on the right),
// so both sides move by the same amount as without a debt, less r.
func Repay(a *Account, field *core.CostUnits, units core.CostUnits) error {
	r := min(units, a.Overage)
	if err := subFrom(&a.Overage, r); err != nil {
		return err
	}
	if err := addAll(r, &a.Repaid); err != nil {
		return err
	}
	return addAll(units-r, field)
}

// Ancestry is an account and its ancestors, leaf first, root last.
type Ancestry []*Account

// Chain returns the funding chain: the metered accounts of the ancestry,
// leaf first. Every charge to the leaf debits every one of them.
func (an Ancestry) Chain() []*Account {
	chain := make([]*Account, 0, len(an))
	for _, a := range an {
		if !a.Unmetered {
			chain = append(chain, a)
		}
	}
	return chain
}

// Inactive returns the account closest to the leaf that is not active
// (suspended or closed), or nil.
func (an Ancestry) Inactive() *Account {
	for _, a := range an {
		if a.Status != core.StatusActive {
			return a
		}
	}
	return nil
}

// Validate checks that an is a real ancestry: non-empty, each account the
// parent of the one before, ending at a root that is metered.
func (an Ancestry) Validate() error {
	if len(an) == 0 {
		return fmt.Errorf("%w: empty ancestry", ErrInvalid)
	}
	for i := 1; i < len(an); i++ {
		if an[i-1].Parent != an[i].ID {
			return fmt.Errorf("%w: %s is not the parent of %s", ErrInvalid, an[i].ID, an[i-1].ID)
		}
	}
	if root := an[len(an)-1]; root.Parent != "" || root.Unmetered {
		return fmt.Errorf("%w: ancestry of %s does not end at a metered root", ErrInvalid, an[0].ID)
	}
	return nil
}

// transact runs f on copies of accts and, if f succeeds and every copy
// still satisfies L1, writes the copies back. The same account must not
// appear twice in accts.
func transact(accts []*Account, f func(n []Account) error) error {
	var buf [4]Account // a funding chain is at most three accounts deep
	n := buf[:0]
	for _, a := range accts {
		n = append(n, *a)
	}
	if err := f(n); err != nil {
		return err
	}
	for i := range n {
		if err := n[i].Conserved(); err != nil {
			return err
		}
	}
	for i, a := range accts {
		*a = n[i]
	}
	return nil
}

// holdsMoney refuses accounts that cannot receive money: unmetered ones
// (they have none of their own) and closed ones.
func holdsMoney(a *Account) error {
	if a.Unmetered {
		return fmt.Errorf("%w: %s is unmetered and holds no money", ErrInvalid, a.ID)
	}
	if a.Status == core.StatusClosed {
		return fmt.Errorf("%w: %s", ErrClosedAccount, a.ID)
	}
	return nil
}

func bumpGeneration(a *Account) error {
	if a.PolicyGeneration == ^uint64(0) {
		return fmt.Errorf("%w: policy generation of %s", ErrOverflow, a.ID)
	}
	a.PolicyGeneration++
	return nil
}

// expireAllowance moves the allowance left to Expired.
func expireAllowance(a *Account) error {
	e, err := a.Expired.Add(a.AllowanceLeft)
	if err != nil {
		return err
	}
	a.Expired, a.AllowanceLeft = e, 0
	return nil
}

// depositAllowance deposits one allowance into an account whose allowance
// left is zero; it repays debt first (Repay).
func depositAllowance(a *Account) error {
	d, err := a.Deposited.Add(a.Budget.Allowance)
	if err != nil {
		return err
	}
	a.Deposited = d
	return Repay(a, &a.AllowanceLeft, a.Budget.Allowance)
}

// addAll adds units to every field, checked; on error some fields may have
// changed, which is why it is only called on transact's copies.
func addAll(units core.CostUnits, fields ...*core.CostUnits) error {
	for _, f := range fields {
		v, err := f.Add(units)
		if err != nil {
			return err
		}
		*f = v
	}
	return nil
}

// subFrom subtracts units from field, checked. Callers check their bounds
// first, so an underflow here means the stored state already broke an
// invariant: it is reported as ErrNotConserved.
func subFrom(field *core.CostUnits, units core.CostUnits) error {
	v, err := field.Sub(units)
	if err != nil {
		return fmt.Errorf("%w: %d - %d: %w", ErrNotConserved, *field, units, err)
	}
	*field = v
	return nil
}
