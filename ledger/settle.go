package ledger

import (
	"fmt"

	"github.com/tollgated/tollgated/core"
)

// Release ends the active lease rec (fencing token token), crediting
// unspent units (at most Granted − Used) back to its funders; funders[i] is
// the account named by rec.Funding[i].
//
// For each funder, Outstanding drops by Granted − Used, and:
//   - unspent comes back allowance part first, repaying debt first (Repay). The lease's usage is counted
//     against its allowance part first, so the allowance part still unspent
//     is Allowance − min(Used, Allowance). It returns to AllowanceLeft if the
//     funder is still in the period the lease was granted in (after rolling
//     it over to now), but never above the budget's Allowance; whatever does
//     not fit is Expired. The rest of unspent returns to TopUpLeft.
//   - the gap Granted − Used − unspent becomes Loss: provisional, since late
//     usage of the lease converts it into Settled (SettleLease).
//
// A lease that was forfeited (Reclaim) is restored: its holder releasing it
// was alive, out of reach of the ledger past the lease's expiry and grace,
// and knows exactly what it did not spend; its forfeit moved
// Granted − Used to Loss, so unspent comes back out of Loss, credited as
// above, and the rest stays provisional loss for the holder's late usage.
// The lease ends released either way. A lease already released is
// ErrLeaseNotActive; a token that does not match is ErrFenced (nothing
// changes and the lease stays reclaimable); unspent above
// Granted − Used is ErrInvalid.
func Release(rec *LeaseRecord, funders []*Account, token uint64, unspent core.CostUnits, now int64) error {
	if rec.State != LeaseActive && rec.State != LeaseReclaimed {
		return fmt.Errorf("%w: lease %d", ErrLeaseNotActive, rec.ID)
	}
	if token != rec.Token {
		return fmt.Errorf("%w: lease %d has token %d, not %d", ErrFenced, rec.ID, rec.Token, token)
	}
	left, err := rec.Granted.Sub(rec.Used)
	if err == nil {
		left, err = left.Sub(rec.Credited) // 0 for an active or forfeited lease
	}
	if err != nil {
		return fmt.Errorf("%w: lease %d used %d and credited %d of %d", ErrNotConserved, rec.ID, rec.Used, rec.Credited, rec.Granted)
	}
	if unspent > left {
		return fmt.Errorf("%w: lease %d has %d units left, cannot return %d", ErrInvalid, rec.ID, left, unspent)
	}
	if err := matchFunders(rec, funders); err != nil {
		return err
	}
	forfeited := rec.State == LeaseReclaimed
	gap := left - unspent
	err = transact(funders, func(n []Account) error {
		for i := range n {
			a, f := &n[i], rec.Funding[i]
			if _, err := RollOver(a, now); err != nil {
				return err
			}
			if forfeited {
				// The forfeit took left out of Outstanding into Loss: the
				// holder's unspent part comes back out of Loss.
				if err := subFrom(&a.Loss, unspent); err != nil {
					return err
				}
			} else {
				if err := subFrom(&a.Outstanding, left); err != nil {
					return err
				}
				if err := addAll(gap, &a.Loss); err != nil {
					return err
				}
			}
			if err := credit(a, f, rec.Used, unspent); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	rec.Credited, rec.State = unspent, LeaseReleased
	return nil
}

// credit returns unspent units of a lease (whose usage so far is used) to
// its funder a, which paid f: allowance part first — to AllowanceLeft while
// a is in the period f was paid from, up to the budget, the rest Expired —
// then top-ups; debt is repaid first (Repay).
func credit(a *Account, f Funding, used, unspent core.CostUnits) error {
	allowanceLeft := f.Allowance - min(used, f.Allowance)
	toAllowance := min(unspent, allowanceLeft)
	back := core.CostUnits(0)
	if a.Budget.Period != PeriodNone && a.PeriodStart == f.PeriodStart && a.AllowanceLeft < a.Budget.Allowance {
		back = min(toAllowance, a.Budget.Allowance-a.AllowanceLeft)
	}
	if err := Repay(a, &a.AllowanceLeft, back); err != nil {
		return err
	}
	if err := addAll(toAllowance-back, &a.Expired); err != nil {
		return err
	}
	return Repay(a, &a.TopUpLeft, unspent-toAllowance)
}

// Forfeit reclaims the active lease rec after its expiry: for each funder,
// Outstanding drops by Granted − Used and the same amount becomes Loss.
// Nothing is credited. Whether the lease is past its grace is the caller's
// decision (Reclaim selects by ReclaimableAt).
func Forfeit(rec *LeaseRecord, funders []*Account) error {
	if rec.State != LeaseActive {
		return fmt.Errorf("%w: lease %d", ErrLeaseNotActive, rec.ID)
	}
	left, err := rec.Granted.Sub(rec.Used)
	if err != nil {
		return fmt.Errorf("%w: lease %d used %d of %d", ErrNotConserved, rec.ID, rec.Used, rec.Granted)
	}
	if err := matchFunders(rec, funders); err != nil {
		return err
	}
	err = transact(funders, func(n []Account) error {
		for i := range n {
			if err := subFrom(&n[i].Outstanding, left); err != nil {
				return err
			}
			if err := addAll(left, &n[i].Loss); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	rec.State = LeaseReclaimed
	return nil
}

// SettleLease bills u against the lease rec that funded it. It reports
// accepted=false, changing nothing, when u does not belong to rec (account,
// lease id or token differ), has no units, or does not fit: an active lease
// takes at most Granted − Used (billed from Outstanding); an ended one at
// most its provisional loss Granted − Used − Credited (billed from Loss:
// late usage turns loss into billed usage). So usage accepted against a
// lease never exceeds what it was granted.
func SettleLease(rec *LeaseRecord, funders []*Account, u *Usage) (accepted bool, err error) {
	if u.Units == 0 || u.Account != rec.Account || u.LeaseID != rec.ID || u.Token != rec.Token {
		return false, nil
	}
	room, err := rec.Granted.Sub(rec.Used)
	if err == nil && rec.State != LeaseActive {
		room, err = room.Sub(rec.Credited)
	}
	if err != nil {
		return false, fmt.Errorf("%w: lease %d granted %d, used %d, credited %d", ErrNotConserved, rec.ID, rec.Granted, rec.Used, rec.Credited)
	}
	if u.Units > room {
		return false, nil
	}
	if err := matchFunders(rec, funders); err != nil {
		return false, err
	}
	used, err := rec.Used.Add(u.Units)
	if err != nil {
		return false, err
	}
	err = transact(funders, func(n []Account) error {
		for i := range n {
			from := &n[i].Outstanding
			if rec.State != LeaseActive {
				from = &n[i].Loss
			}
			if err := subFrom(from, u.Units); err != nil {
				return err
			}
			if err := addAll(u.Units, &n[i].Settled); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	rec.Used = used
	return true, nil
}

// SettleLeaseUnits bills u.Units of usage against the lease rec that funded
// it, as SettleLease bills one event, and reports how many units it took:
// all of them when they fit, what fits when they do not (an ended lease
// takes at most its provisional loss), none when u names another account,
// lease or token. Summing events into one total changes nothing a lease can
// take: it never exceeds what it was granted.
func SettleLeaseUnits(rec *LeaseRecord, funders []*Account, u *LeaseUsage) (core.CostUnits, error) {
	if u.Units == 0 || u.Account != rec.Account || u.LeaseID != rec.ID || u.Token != rec.Token {
		return 0, nil
	}
	room, err := rec.Granted.Sub(rec.Used)
	if err == nil && rec.State != LeaseActive {
		room, err = room.Sub(rec.Credited)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: lease %d granted %d, used %d, credited %d", ErrNotConserved, rec.ID, rec.Granted, rec.Used, rec.Credited)
	}
	take := min(u.Units, room)
	if take == 0 {
		return 0, nil
	}
	ev := Usage{Account: u.Account, LeaseID: u.LeaseID, Token: u.Token, Units: take, Source: UsageLease}
	if ok, err := SettleLease(rec, funders, &ev); err != nil || !ok {
		return 0, err
	}
	return take, nil
}

// SettleOverage bills units of elastic overage — admitted beyond the
// lease that funded nothing of it — to every account of chain, as
// SettlePostPaid does: the work ran, so each account pays what its balance
// covers and owes the rest.
func SettleOverage(chain []*Account, units core.CostUnits, now int64) error {
	return SettlePostPaid(chain, units, now)
}

// SettlePostPaid bills units reported after the fact to every account of
// chain: each (rolled over to now) pays what its Balance covers, allowance
// first, and the rest is Overage (debt, which the next funds to arrive
// repay); Settled grows by units.
func SettlePostPaid(chain []*Account, units core.CostUnits, now int64) error {
	if units == 0 {
		return fmt.Errorf("%w: usage without units", ErrInvalid)
	}
	return transact(chain, func(n []Account) error {
		for i := range n {
			a := &n[i]
			if _, err := RollOver(a, now); err != nil {
				return err
			}
			fromAllowance := min(units, a.AllowanceLeft)
			fromTopUp := min(units-fromAllowance, a.TopUpLeft)
			over := units - fromAllowance - fromTopUp
			if err := subFrom(&a.AllowanceLeft, fromAllowance); err != nil {
				return err
			}
			if err := subFrom(&a.TopUpLeft, fromTopUp); err != nil {
				return err
			}
			if err := addAll(over, &a.Overage); err != nil {
				return err
			}
			if err := addAll(units, &a.Settled); err != nil {
				return err
			}
		}
		return nil
	})
}

// FundersIn returns the accounts of an that funded rec, in rec.Funding
// order, or ErrInvalid if one is missing.
func FundersIn(rec *LeaseRecord, an Ancestry) ([]*Account, error) {
	funders := make([]*Account, len(rec.Funding))
	for i, f := range rec.Funding {
		for _, a := range an {
			if a.ID == f.Account {
				funders[i] = a
				break
			}
		}
		if funders[i] == nil {
			return nil, fmt.Errorf("%w: funder %s of lease %d is not in the ancestry of %s", ErrInvalid, f.Account, rec.ID, rec.Account)
		}
	}
	return funders, nil
}

// matchFunders checks that funders line up with rec.Funding and that the
// record itself is sound (each funder funded the whole grant).
func matchFunders(rec *LeaseRecord, funders []*Account) error {
	if len(funders) != len(rec.Funding) || len(funders) == 0 {
		return fmt.Errorf("%w: lease %d has %d funders, got %d accounts", ErrInvalid, rec.ID, len(rec.Funding), len(funders))
	}
	for i, f := range rec.Funding {
		if funders[i].ID != f.Account {
			return fmt.Errorf("%w: lease %d funder %d is %s, got %s", ErrInvalid, rec.ID, i, f.Account, funders[i].ID)
		}
		if s, err := f.Allowance.Add(f.TopUp); err != nil || s != rec.Granted {
			return fmt.Errorf("%w: lease %d funder %s paid %d+%d of %d", ErrNotConserved, rec.ID, f.Account, f.Allowance, f.TopUp, rec.Granted)
		}
	}
	return nil
}

// BilledEvents calls fn, in order, for the events of st.History that the
// settlement billed, given the units it billed of each lease total
// (leaseTook[i] of st.Leases[i]) and of each overage total
// (overageTook[i] of st.Overage[i]). A total's billed units go to its
// events first come, first billed; the event that straddles the bound is
// passed with the units billed of it, and later ones are not passed. So
// the events passed add up to at most what the settlement billed, and to
// exactly that when History holds every folded event.
func BilledEvents(st *Settlement, leaseTook, overageTook []core.CostUnits, fn func(*Usage) error) error {
	if len(leaseTook) != len(st.Leases) || len(overageTook) != len(st.Overage) {
		return fmt.Errorf("%w: %d lease and %d overage results for %d and %d totals",
			ErrInvalid, len(leaseTook), len(overageTook), len(st.Leases), len(st.Overage))
	}
	left := make(map[LeaseUsage]core.CostUnits, len(st.Leases)+len(st.Overage))
	for i, l := range st.Leases {
		left[LeaseUsage{Account: l.Account, LeaseID: l.LeaseID, Token: l.Token}] += leaseTook[i]
	}
	for i, o := range st.Overage {
		left[LeaseUsage{Account: o.Account}] += overageTook[i]
	}
	for i := range st.History {
		u := st.History[i]
		key := LeaseUsage{Account: u.Account}
		if u.Source != UsageOverage {
			key.LeaseID, key.Token = u.LeaseID, u.Token
		}
		room := left[key]
		if room == 0 || u.Units == 0 {
			continue
		}
		u.Units = min(u.Units, room)
		left[key] = room - u.Units
		if err := fn(&u); err != nil {
			return err
		}
	}
	return nil
}
