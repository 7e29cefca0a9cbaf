package ledger

import (
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/core"
)

// Conservation checks a whole ledger, streaming: feed it every lease
// (Lease), then every account (Account), then call Done. Besides L1 for
// every account it checks what ties accounts to leases:
//
//	L2: Outstanding == Σ (Granted − Used) over the active leases it funds
//	L3: Loss        == Σ (Granted − Used − Credited) over its ended leases
//	L4: Used + Credited ≤ Granted for every lease (bounded spend), and each
//	    funder of a lease funded exactly Granted (Allowance + TopUp)
//	L5: AllowanceLeft ≤ Budget.Allowance
//
// L3 holds because loss only ever comes from leases (the gap of a release,
// the remainder of a reclaim) and late usage converts it back. Every error
// wraps ErrNotConserved and describes the first violation found.
type Conservation struct {
	outstanding map[core.AccountID]core.CostUnits
	loss        map[core.AccountID]core.CostUnits
	seen        map[core.AccountID]bool
}

// NewConservation returns an empty checker.
func NewConservation() *Conservation {
	return &Conservation{
		outstanding: make(map[core.AccountID]core.CostUnits),
		loss:        make(map[core.AccountID]core.CostUnits),
		seen:        make(map[core.AccountID]bool),
	}
}

// Lease checks rec on its own (L4) and adds it to its funders' totals.
func (c *Conservation) Lease(rec *LeaseRecord) error {
	spent, err := rec.Used.Add(rec.Credited)
	if err != nil || spent > rec.Granted {
		return fmt.Errorf("%w: lease %d: used %d + credited %d > granted %d", ErrNotConserved, rec.ID, rec.Used, rec.Credited, rec.Granted)
	}
	var totals map[core.AccountID]core.CostUnits
	switch rec.State {
	case LeaseActive:
		if rec.Credited != 0 {
			return fmt.Errorf("%w: active lease %d has credited %d", ErrNotConserved, rec.ID, rec.Credited)
		}
		totals = c.outstanding
	case LeaseReleased, LeaseReclaimed:
		totals = c.loss
	default:
		return fmt.Errorf("%w: lease %d has unknown state %d", ErrNotConserved, rec.ID, rec.State)
	}
	if len(rec.Funding) == 0 {
		return fmt.Errorf("%w: lease %d has no funders", ErrNotConserved, rec.ID)
	}
	open := rec.Granted - spent // what the funders still hold for it
	for _, f := range rec.Funding {
		if s, err := f.Allowance.Add(f.TopUp); err != nil || s != rec.Granted {
			return fmt.Errorf("%w: lease %d: funder %s paid %d+%d of %d", ErrNotConserved, rec.ID, f.Account, f.Allowance, f.TopUp, rec.Granted)
		}
		t, err := totals[f.Account].Add(open)
		if err != nil {
			return fmt.Errorf("%w: lease totals of %s: %w", ErrNotConserved, f.Account, err)
		}
		totals[f.Account] = t
	}
	return nil
}

// Account checks L1, L2 and L3 for a, against the leases fed so far.
func (c *Conservation) Account(a *Account) error {
	if err := a.Conserved(); err != nil {
		if errors.Is(err, ErrNotConserved) {
			return err
		}
		return fmt.Errorf("%w: account %s: %w", ErrNotConserved, a.ID, err)
	}
	c.seen[a.ID] = true
	if want := c.outstanding[a.ID]; a.Outstanding != want {
		return fmt.Errorf("%w: account %s: outstanding %d, but its active leases hold %d", ErrNotConserved, a.ID, a.Outstanding, want)
	}
	if want := c.loss[a.ID]; a.Loss != want {
		return fmt.Errorf("%w: account %s: loss %d, but its ended leases forfeited %d", ErrNotConserved, a.ID, a.Loss, want)
	}
	if a.Budget.Allowance < a.AllowanceLeft {
		return fmt.Errorf("%w: account %s: allowance left %d exceeds the allowance %d", ErrNotConserved, a.ID, a.AllowanceLeft, a.Budget.Allowance)
	}
	return nil
}

// Done reports a lease funded by an account that was never fed.
func (c *Conservation) Done() error {
	for _, totals := range []map[core.AccountID]core.CostUnits{c.outstanding, c.loss} {
		for id := range totals {
			if !c.seen[id] {
				return fmt.Errorf("%w: leases are funded by unknown account %s", ErrNotConserved, id)
			}
		}
	}
	return nil
}

// CheckConservation streams a whole ledger through a Conservation, in the
// order it needs: eachLease calls its argument with every lease, then
// eachAccount with every account. The first error ends it: a violation
// (wrapping ErrNotConserved) or the reader's own.
func CheckConservation(eachLease func(func(*LeaseRecord) error) error, eachAccount func(func(*Account) error) error) error {
	c := NewConservation()
	if err := eachLease(c.Lease); err != nil {
		return err
	}
	if err := eachAccount(c.Account); err != nil {
		return err
	}
	return c.Done()
}
