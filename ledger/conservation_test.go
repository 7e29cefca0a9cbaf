package ledger

import (
	"errors"
	"strings"
	"testing"
)

// conserve runs the whole check over accounts and leases.
func conserve(accts []*Account, leases []*LeaseRecord) error {
	c := NewConservation()
	for _, l := range leases {
		if err := c.Lease(l); err != nil {
			return err
		}
	}
	for _, a := range accts {
		if err := c.Account(a); err != nil {
			return err
		}
	}
	return c.Done()
}

func TestConservationFindsEachViolation(t *testing.T) {
	for _, c := range []struct {
		name   string
		break_ func(org *Account, rec *LeaseRecord)
		msg    string
	}{
		{"nothing", func(*Account, *LeaseRecord) {}, ""},
		{"L1", func(org *Account, _ *LeaseRecord) { org.TopUpLeft++ }, "deposited"},
		{"L2", func(org *Account, _ *LeaseRecord) { org.Outstanding++; org.Deposited++ }, "outstanding 301"},
		{"L3", func(org *Account, _ *LeaseRecord) { org.Loss++; org.Deposited++ }, "loss 1"},
		{"L4 used", func(_ *Account, rec *LeaseRecord) { rec.Used = 301 }, "used 301"},
		{"L4 funding", func(_ *Account, rec *LeaseRecord) { rec.Funding[0].TopUp-- }, "paid"},
		{"credited while active", func(_ *Account, rec *LeaseRecord) { rec.Credited = 1 }, "credited 1"},
		{"unknown state", func(_ *Account, rec *LeaseRecord) { rec.State = 9 }, "unknown state"},
		{"no funders", func(_ *Account, rec *LeaseRecord) { rec.Funding = nil }, "no funders"},
		{"unknown funder", func(org *Account, rec *LeaseRecord) {
			rec.Funding[0].Account = "ghost"
			org.Outstanding, org.TopUpLeft = 0, org.TopUpLeft+org.Outstanding
		}, "unknown account ghost"},
		{"L5", func(org *Account, _ *LeaseRecord) { org.AllowanceLeft += 101; org.Deposited += 101 }, "allowance left 101"},
		{"overflow", func(org *Account, _ *LeaseRecord) { org.Overage = ^org.Overage }, "overflow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			org, rec := funded(t)
			c.break_(org, rec)
			err := conserve([]*Account{org}, []*LeaseRecord{rec})
			if c.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNotConserved) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want ErrNotConserved mentioning %q", err, c.msg)
			}
		})
	}
}

func TestConservationCountsEndedLeasesAsLoss(t *testing.T) {
	org, rec := funded(t)
	if err := Release(rec, []*Account{org}, rec.Token, 100, t0); err != nil {
		t.Fatal(err)
	}
	if err := conserve([]*Account{org}, []*LeaseRecord{rec}); err != nil {
		t.Fatal(err)
	}
	org.Loss-- // the released lease forfeited 200
	org.Deposited--
	if err := conserve([]*Account{org}, []*LeaseRecord{rec}); !errors.Is(err, ErrNotConserved) || !strings.Contains(err.Error(), "forfeited 200") {
		t.Fatalf("err = %v", err)
	}
}
