package ledger

import (
	"errors"
	"testing"

	"github.com/tollgated/tollgated/core"
	"pgregory.net/rapid"
)

// TestRandomRuleSequencesConserve drives the rules alone (no store) through
// random sequences over a small hierarchy and checks L1–L5 after every
// step. The store-level property test in ledgertest repeats this through a
// real backend; this one is fast enough to explore many more sequences.
func TestRandomRuleSequencesConserve(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		org, _ := NewAccount(AccountSpec{ID: "org"}, nil)
		ws1, _ := NewAccount(AccountSpec{ID: "ws1", Parent: "org"}, &org)
		ws2, _ := NewAccount(AccountSpec{ID: "ws2", Parent: "org", Unmetered: true}, &org)
		a1, _ := NewAccount(AccountSpec{ID: "a1", Parent: "ws1", Unmetered: rapid.Bool().Draw(t, "a1 unmetered")}, &ws1)
		a2, _ := NewAccount(AccountSpec{ID: "a2", Parent: "ws2", Unmetered: rapid.Bool().Draw(t, "a2 unmetered")}, &ws2)
		all := []*Account{&org, &ws1, &ws2, &a1, &a2}
		ancestry := map[core.AccountID]Ancestry{
			"org": {&org}, "ws1": {&ws1, &org}, "ws2": {&ws2, &org},
			"a1": {&a1, &ws1, &org}, "a2": {&a2, &ws2, &org},
		}
		var leases []*LeaseRecord
		now := t0
		units := rapid.Custom(func(t *rapid.T) core.CostUnits { return core.CostUnits(rapid.IntRange(0, 300).Draw(t, "units")) })
		pickAccount := rapid.SampledFrom(all)
		expected := func(err error, allowed ...error) {
			if err == nil {
				return
			}
			if _, refused := errors.AsType[*Refusal](err); refused {
				return
			}
			for _, a := range allowed {
				if errors.Is(err, a) {
					return
				}
			}
			t.Fatalf("unexpected error: %v", err)
		}
		pickLease := func(t *rapid.T) *LeaseRecord {
			if len(leases) == 0 {
				t.Skip("no lease")
			}
			return rapid.SampledFrom(leases).Draw(t, "lease")
		}
		funders := func(rec *LeaseRecord) []*Account {
			f, err := FundersIn(rec, ancestry[rec.Account])
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		t.Repeat(map[string]func(*rapid.T){
			"topup": func(t *rapid.T) {
				expected(TopUp(pickAccount.Draw(t, "account"), units.Draw(t, "units")), ErrInvalid, ErrClosedAccount)
			},
			"budget": func(t *rapid.T) {
				b := Budget{Period: Period(rapid.IntRange(0, 3).Draw(t, "period"))}
				if b.Period != PeriodNone {
					b.Allowance = units.Draw(t, "allowance")
				}
				_, err := ChangeBudget(pickAccount.Draw(t, "account"), b, now)
				expected(err, ErrInvalid, ErrClosedAccount)
			},
			"status": func(t *rapid.T) {
				s := core.Status(rapid.IntRange(0, 2).Draw(t, "status"))
				_, err := ChangeStatus(pickAccount.Draw(t, "account"), s)
				expected(err, ErrClosedAccount)
			},
			"acquire": func(t *rapid.T) {
				a := pickAccount.Draw(t, "account")
				rec, _, err := Acquire(ancestry[a.ID], uint64(len(leases)+1), "node-a", units.Draw(t, "want"), units.Draw(t, "need"), 1+int64(units.Draw(t, "ttl")), now)
				expected(err, ErrInvalid)
				if err == nil {
					leases = append(leases, &rec)
				}
			},
			"extend": func(t *rapid.T) {
				rec := pickLease(t)
				_, err := Extend(rec, ancestry[rec.Account], rec.Token, units.Draw(t, "want"), units.Draw(t, "need"), 10, now)
				expected(err, ErrInvalid, ErrLeaseNotActive, ErrPeriodEnded)
			},
			"release": func(t *rapid.T) {
				rec := pickLease(t)
				unspent := core.CostUnits(rapid.Uint64Range(0, uint64(rec.Granted-rec.Used)+1).Draw(t, "unspent"))
				expected(Release(rec, funders(rec), rec.Token, unspent, now), ErrInvalid, ErrLeaseNotActive)
			},
			"forfeit": func(t *rapid.T) {
				rec := pickLease(t)
				expected(Forfeit(rec, funders(rec)), ErrLeaseNotActive)
			},
			"settle lease": func(t *rapid.T) {
				rec := pickLease(t)
				u := Usage{Account: rec.Account, LeaseID: rec.ID, Token: rec.Token, Units: units.Draw(t, "units")}
				before := rec.Used
				ok, err := SettleLease(rec, funders(rec), &u)
				expected(err)
				if (ok && (u.Units == 0 || rec.Used != before+u.Units)) || (!ok && rec.Used != before) {
					t.Fatalf("accepted %v, used %d -> %d", ok, before, rec.Used)
				}
			},
			"overage": func(t *rapid.T) {
				a := pickAccount.Draw(t, "account")
				expected(SettleOverage(ancestry[a.ID].Chain(), units.Draw(t, "units"), now), ErrInvalid)
			},
			"post-paid": func(t *rapid.T) {
				a := pickAccount.Draw(t, "account")
				expected(SettlePostPaid(ancestry[a.ID].Chain(), units.Draw(t, "units"), now), ErrInvalid)
			},
			"rollover": func(t *rapid.T) {
				_, err := RollOver(pickAccount.Draw(t, "account"), now)
				expected(err)
			},
			"advance": func(t *rapid.T) {
				now += rapid.Int64Range(1, 10*dayNs).Draw(t, "dt")
			},
			"": func(t *rapid.T) {
				if err := conserve(all, leases); err != nil {
					t.Fatal(err)
				}
				var used, granted core.CostUnits
				for _, l := range leases {
					used += l.Used
					granted += l.Granted
				}
				if used > granted {
					t.Fatalf("used %d of %d granted", used, granted)
				}
			},
		})
	})
}
