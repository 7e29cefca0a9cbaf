package ledger

import (
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/core"
)

// Books is a backend's transaction as the billing rules read it: accounts
// with their ancestors, and leases with their funders, under the
// transaction's locks. Whatever does not exist is ErrNotFound.
type Books interface {
	Ancestry(id core.AccountID) (Ancestry, error)
	LeaseFunders(id uint64) (*LeaseRecord, []*Account, error)
}

// Bill applies one new usage event in b and returns its verdict: unknown
// accounts, unknown sources, zero units, and lease usage that does not
// match its lease or does not fit in it are Rejected (SettleLease); an
// error aborts the caller's batch.
func Bill(b Books, e *Usage, now int64) (IngestResult, error) {
	if e.Units == 0 || e.Account.Validate() != nil {
		return Rejected, nil
	}
	an, err := b.Ancestry(e.Account)
	if errors.Is(err, ErrNotFound) {
		return Rejected, nil
	}
	if err != nil {
		return 0, err
	}
	switch e.Source {
	case UsageLease:
		rec, funders, err := b.LeaseFunders(e.LeaseID)
		if errors.Is(err, ErrNotFound) {
			return Rejected, nil
		}
		if err != nil {
			return 0, err
		}
		ok, err := SettleLease(rec, funders, e)
		if err != nil || !ok {
			return Rejected, err
		}
	case UsageOverage:
		if err := SettleOverage(an.Chain(), e.Units, now); err != nil {
			return 0, err
		}
	case UsagePostPaid:
		if err := SettlePostPaid(an.Chain(), e.Units, now); err != nil {
			return 0, err
		}
	default:
		return Rejected, nil
	}
	return Accepted, nil
}

// SettleTotals bills st's totals in b: each lease total takes what its
// lease can (SettleLeaseUnits; nothing of a lease that does not exist),
// each overage total is billed to its account's chain (nothing to an
// account that does not exist). It reports the units each total took
// (for BilledEvents) and the settlement's counts; the mark is the
// caller's.
func SettleTotals(b Books, st *Settlement, now int64) (res SettleResult, leaseTook, overageTook []core.CostUnits, err error) {
	leaseTook = make([]core.CostUnits, len(st.Leases))
	for i := range st.Leases {
		u := &st.Leases[i]
		rec, funders, err := b.LeaseFunders(u.LeaseID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return res, nil, nil, err
		}
		if err == nil {
			if leaseTook[i], err = SettleLeaseUnits(rec, funders, u); err != nil {
				return res, nil, nil, fmt.Errorf("usage of lease %d: %w", u.LeaseID, err)
			}
		}
		if err := res.Add(leaseTook[i], u.Units-leaseTook[i]); err != nil {
			return res, nil, nil, err
		}
	}
	overageTook = make([]core.CostUnits, len(st.Overage))
	for i := range st.Overage {
		u := &st.Overage[i]
		an, err := b.Ancestry(u.Account)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return res, nil, nil, err
		}
		if err == nil && u.Units > 0 {
			if err := SettleOverage(an.Chain(), u.Units, now); err != nil {
				return res, nil, nil, fmt.Errorf("overage of %s: %w", u.Account, err)
			}
			overageTook[i] = u.Units
		}
		if err := res.Add(overageTook[i], u.Units-overageTook[i]); err != nil {
			return res, nil, nil, err
		}
	}
	return res, leaseTook, overageTook, nil
}
