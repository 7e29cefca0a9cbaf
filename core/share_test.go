package core

import "testing"

func TestShareLimitsAnEngineAndSignalsStarvation(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) {
		s.Limits.RequestRate, s.Limits.RequestBurst = 100, 10
		s.Limits.MaxConcurrent = 8
	})
	must(t, f.e.SetShare("acme", Share{RequestRate: 10, RequestBurst: 2, UnitRate: 100_000, UnitBurst: 200_000, MaxConcurrent: 8}))
	f.e.DrainRefills(nil)
	f.admitAndCancel(2, t0)
	_, d := f.admit(oneReq, t0)
	if d.Reason != DenyRequestRateLimited || d.RetryAfter != 100e6 {
		t.Fatalf("share of 2 exceeded: %+v", d)
	}
	reqs := f.e.DrainRefills(nil)
	if len(reqs) != 1 || !reqs[0].RateStarved || reqs[0].WantsFunds {
		t.Fatalf("starvation not signalled: %+v", reqs)
	}
	// A zero share refuses with a short hint; the snapshot's own limits
	// come back when the share is cleared.
	must(t, f.e.SetShare("acme", Share{UnitRate: 100_000, UnitBurst: 200_000, MaxConcurrent: 8}))
	if _, d := f.admit(oneReq, t0+1e9); d.Reason != DenyRequestRateLimited || d.RetryAfter != shareRetryHint {
		t.Fatalf("zero share: %+v", d)
	}
	f.e.ClearShare("acme")
	if _, d := f.admit(oneReq, t0+2e9); d.Denied() {
		t.Fatalf("cleared share still limits: %+v", d)
	}
	if err := f.e.SetShare("nobody", Share{}); err != ErrUnknownAccount {
		t.Fatal(err)
	}
}

func TestShareConcurrency(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) { s.Limits.MaxConcurrent = 8 })
	must(t, f.e.SetShare("acme", Share{UnitRate: 100_000, UnitBurst: 200_000, MaxConcurrent: 1}))
	f.admit(oneReq, t0)
	if _, d := f.admit(oneReq, t0); d.Reason != DenyConcurrencyLimited {
		t.Fatalf("share of one slot exceeded: %+v", d)
	}
}

// TestShrinkingShareCapsSpendableTokensAtOnce: tokens saved under a large
// share cannot be spent after the share shrinks, which is what lets the
// control plane move share without the node's total ever exceeding it.
func TestShrinkingShareCapsSpendableTokensAtOnce(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) { s.Limits.RequestRate, s.Limits.RequestBurst = 1, 100 })
	must(t, f.e.SetShare("acme", Share{RequestRate: 1, RequestBurst: 100, UnitRate: 100_000, UnitBurst: 200_000}))
	r, _ := f.admit(oneReq, t0) // bucket starts full: 99 left
	f.e.Cancel(r, t0)
	must(t, f.e.SetShare("acme", Share{RequestRate: 1, RequestBurst: 3, UnitRate: 100_000, UnitBurst: 200_000}))
	admitted := 0
	for range 10 {
		if r, d := f.admit(oneReq, t0); !d.Denied() {
			admitted++
			f.e.Cancel(r, t0)
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d after shrinking the burst to 3", admitted)
	}
}
