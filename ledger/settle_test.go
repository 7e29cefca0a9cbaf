package ledger

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tollgated/tollgated/core"
)

// funded returns an org with a 100/day allowance and 400 of top-ups, and a
// lease on it of 300 units granted at t0 (100 allowance + 200 top-up).
func funded(t *testing.T) (*Account, *LeaseRecord) {
	t.Helper()
	org, ws, _ := family(t)
	if _, err := ChangeBudget(org, Budget{Allowance: 100, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	if err := TopUp(org, 400); err != nil {
		t.Fatal(err)
	}
	rec, _, err := Acquire(Ancestry{ws, org}, 1, "node-a", 300, 300, 60e9, t0) // need keeps it from halving
	if err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 500, TopUpLeft: 200, Outstanding: 300})
	return org, &rec
}

func usage(rec *LeaseRecord, units core.CostUnits) *Usage {
	return &Usage{Account: rec.Account, Source: UsageLease, LeaseID: rec.ID, Token: rec.Token, Units: units}
}

func settle(t *testing.T, rec *LeaseRecord, org *Account, units core.CostUnits) {
	t.Helper()
	if ok, err := SettleLease(rec, []*Account{org}, usage(rec, units)); !ok || err != nil {
		t.Fatalf("settle %d: %v %v", units, ok, err)
	}
}

func TestReleaseCreditsAllowanceFirstAndLosesTheGap(t *testing.T) {
	org, rec := funded(t)
	settle(t, rec, org, 30) // counted against the allowance part: 70 of it left
	if err := Release(rec, []*Account{org}, rec.Token, 250, t0+1); err != nil {
		t.Fatal(err)
	}
	// 70 back to the allowance, 180 to top-ups, 20 lost.
	wantMoney(t, org, money{Deposited: 500, AllowanceLeft: 70, TopUpLeft: 380, Settled: 30, Loss: 20})
	if rec.State != LeaseReleased || rec.Credited != 250 || rec.Used != 30 {
		t.Fatalf("lease %+v", rec)
	}
	if err := Release(rec, []*Account{org}, rec.Token, 0, t0+1); !errors.Is(err, ErrLeaseNotActive) {
		t.Fatalf("second release: %v", err)
	}
}

func TestReleaseAfterThePeriodExpiresTheAllowancePart(t *testing.T) {
	org, rec := funded(t)
	next := utc(2026, 3, 11, 0, 0)
	if err := Release(rec, []*Account{org}, rec.Token, 300, next); err != nil {
		t.Fatal(err)
	}
	// Rolled over first (a fresh 100), then the old 100 expired.
	wantMoney(t, org, money{Deposited: 600, AllowanceLeft: 100, TopUpLeft: 400, Expired: 100})
}

func TestReleaseNeverLiftsTheAllowanceAboveTheBudget(t *testing.T) {
	org, rec := funded(t)
	// Same period, smaller budget: the new allowance of 40 is deposited.
	if _, err := ChangeBudget(org, Budget{Allowance: 40, Period: PeriodDay}, t0+1); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 540, AllowanceLeft: 40, TopUpLeft: 200, Outstanding: 300})
	if err := Release(rec, []*Account{org}, rec.Token, 300, t0+2); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 540, AllowanceLeft: 40, TopUpLeft: 400, Expired: 100})
}

func TestReleaseRefusalsChangeNothing(t *testing.T) {
	org, rec := funded(t)
	before, lease := *org, *rec
	for _, c := range []struct {
		token   uint64
		unspent core.CostUnits
		funders []*Account
		err     error
	}{
		{2, 0, []*Account{org}, ErrFenced},
		{1, 301, []*Account{org}, ErrInvalid},
		{1, 0, nil, ErrInvalid},
		{1, 0, []*Account{{AccountSpec: AccountSpec{ID: "other"}}}, ErrInvalid},
	} {
		if err := Release(rec, c.funders, c.token, c.unspent, t0); !errors.Is(err, c.err) {
			t.Errorf("token %d unspent %d: %v, want %v", c.token, c.unspent, err, c.err)
		}
	}
	if !reflect.DeepEqual(*org, before) || !reflect.DeepEqual(*rec, lease) {
		t.Fatal("a refused release changed something")
	}
}

func TestForfeitAndLateUsage(t *testing.T) {
	org, rec := funded(t)
	settle(t, rec, org, 50)
	if err := Forfeit(rec, []*Account{org}); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 500, TopUpLeft: 200, Settled: 50, Loss: 250})
	if rec.State != LeaseReclaimed {
		t.Fatalf("state %d", rec.State)
	}
	if err := Forfeit(rec, []*Account{org}); !errors.Is(err, ErrLeaseNotActive) {
		t.Fatalf("second forfeit: %v", err)
	}
	// Late usage turns loss into billed usage, up to the loss.
	settle(t, rec, org, 200)
	wantMoney(t, org, money{Deposited: 500, TopUpLeft: 200, Settled: 250, Loss: 50})
	if ok, err := SettleLease(rec, []*Account{org}, usage(rec, 51)); ok || err != nil {
		t.Fatalf("beyond the loss: %v %v", ok, err)
	}
	settle(t, rec, org, 50)
	wantMoney(t, org, money{Deposited: 500, TopUpLeft: 200, Settled: 300})
	if rec.Used != 300 {
		t.Fatalf("used %d", rec.Used)
	}
}

// TestReleaseRestoresAForfeitedLease: the holder of a lease forfeited while
// it could not reach the ledger releases it when it can: what it did not
// spend comes back out of loss, credited as a release credits it, and the
// rest stays loss for its late usage. Once restored, it is released.
func TestReleaseRestoresAForfeitedLease(t *testing.T) {
	org, rec := funded(t)
	settle(t, rec, org, 30)
	if err := Forfeit(rec, []*Account{org}); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 500, TopUpLeft: 200, Settled: 30, Loss: 270})
	before, lease := *org, *rec
	for _, c := range []struct {
		token   uint64
		unspent core.CostUnits
		err     error
	}{{2, 0, ErrFenced}, {1, 271, ErrInvalid}} {
		if err := Release(rec, []*Account{org}, c.token, c.unspent, t0+1); !errors.Is(err, c.err) {
			t.Fatalf("token %d unspent %d: %v, want %v", c.token, c.unspent, err, c.err)
		}
	}
	if !reflect.DeepEqual(*org, before) || !reflect.DeepEqual(*rec, lease) {
		t.Fatal("a refused restoration changed something")
	}
	// The holder spent 50 more (not yet settled) and returns 220.
	if err := Release(rec, []*Account{org}, rec.Token, 220, t0+1); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 500, AllowanceLeft: 70, TopUpLeft: 350, Settled: 30, Loss: 50})
	if rec.State != LeaseReleased || rec.Credited != 220 {
		t.Fatalf("lease %+v", rec)
	}
	settle(t, rec, org, 50) // its late usage takes the rest of the loss
	wantMoney(t, org, money{Deposited: 500, AllowanceLeft: 70, TopUpLeft: 350, Settled: 80})
	if ok, err := SettleLease(rec, []*Account{org}, usage(rec, 1)); ok || err != nil {
		t.Fatalf("usage beyond what was not returned: %v %v", ok, err)
	}
	if err := Release(rec, []*Account{org}, rec.Token, 0, t0+1); !errors.Is(err, ErrLeaseNotActive) {
		t.Fatalf("second restoration: %v", err)
	}
}

func TestSettleLeaseRejectsWhatDoesNotBelong(t *testing.T) {
	org, rec := funded(t)
	for _, u := range []Usage{
		{Account: "ws", LeaseID: 1, Token: 2, Units: 1},
		{Account: "ws", LeaseID: 2, Token: 1, Units: 1},
		{Account: "org", LeaseID: 1, Token: 1, Units: 1},
		{Account: "ws", LeaseID: 1, Token: 1, Units: 0},
		{Account: "ws", LeaseID: 1, Token: 1, Units: 301},
	} {
		if ok, err := SettleLease(rec, []*Account{org}, &u); ok || err != nil {
			t.Errorf("%+v accepted (%v)", u, err)
		}
	}
	settle(t, rec, org, 300)
	if ok, _ := SettleLease(rec, []*Account{org}, usage(rec, 1)); ok {
		t.Fatal("accepted past the grant")
	}
	// Released with 0 credited and everything used: no loss, nothing more.
	if err := Release(rec, []*Account{org}, 1, 0, t0); err != nil {
		t.Fatal(err)
	}
	if ok, _ := SettleLease(rec, []*Account{org}, usage(rec, 1)); ok {
		t.Fatal("accepted past the grant after release")
	}
	wantMoney(t, org, money{Deposited: 500, TopUpLeft: 200, Settled: 300})
}

func TestOverageAndPostPaidChargeTheWholeChain(t *testing.T) {
	org, ws, agent := family(t)
	if _, err := ChangeBudget(org, Budget{Allowance: 10, Period: PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	if err := TopUp(org, 5); err != nil {
		t.Fatal(err)
	}
	if err := TopUp(agent, 100); err != nil {
		t.Fatal(err)
	}
	chain := Ancestry{agent, ws, org}.Chain()
	if err := SettleOverage(chain, 7, t0); err != nil {
		t.Fatal(err)
	}
	// Elastic overage is paid from each balance first, like post-paid.
	wantMoney(t, agent, money{Deposited: 100, TopUpLeft: 93, Settled: 7})
	wantMoney(t, org, money{Deposited: 15, AllowanceLeft: 3, TopUpLeft: 5, Settled: 7})
	if err := SettlePostPaid(chain, 20, t0); err != nil {
		t.Fatal(err)
	}
	// The agent covers 20 from top-ups; the org 3 allowance + 5 top-up, 12 over.
	wantMoney(t, agent, money{Deposited: 100, TopUpLeft: 73, Settled: 27})
	wantMoney(t, org, money{Deposited: 15, Overage: 12, Settled: 27})
	// After midnight the new allowance repays the debt first: 10 of 12.
	if err := SettlePostPaid(chain, 4, utc(2026, 3, 11, 1, 0)); err != nil {
		t.Fatal(err)
	}
	wantMoney(t, org, money{Deposited: 25, Overage: 6, Settled: 31})
	for _, f := range []func() error{
		func() error { return SettleOverage(chain, 0, t0) },
		func() error { return SettlePostPaid(chain, 0, t0) },
	} {
		if err := f(); !errors.Is(err, ErrInvalid) {
			t.Errorf("zero units: %v", err)
		}
	}
	// Overage that would overflow Settled changes nothing.
	before := []Account{*agent, *org}
	if err := SettleOverage(chain, core.MaxCostUnits-30, t0); !errors.Is(err, ErrOverflow) {
		t.Fatalf("overflow: %v", err)
	}
	if !reflect.DeepEqual([]Account{*agent, *org}, before) {
		t.Fatal("overflowing overage changed the accounts")
	}
}
