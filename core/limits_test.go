package core

import (
	"errors"
	"testing"
)

func TestRequestRateRefusesWithExactRetry(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) { s.Limits.RequestRate, s.Limits.RequestBurst = 4, 2 })
	f.admitAndCancel(2, t0)
	_, d := f.admit(oneReq, t0)
	if d.Reason != DenyRequestRateLimited || d.RetryAfter != 250e6 {
		t.Fatalf("third request: %+v, want request_rate_limited after 250ms", d)
	}
	if _, d := f.admit(oneReq, t0+250e6); d.Denied() {
		t.Fatalf("retry at the advertised time refused: %+v", d)
	}
}

func TestWeightedRateAndUnpriceable(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) {
		s.Limits.UnitRate, s.Limits.UnitBurst = 1000, 1502 // worst case 2+500*... needs MaxItems small
		s.Limits.MaxItems = 3
	})
	r, d := f.admit([]WorkItem{{Op: 1, Count: 3}}, t0) // 11 → minimum 20
	if d.Denied() {
		t.Fatal(d)
	}
	f.e.Cancel(r, t0)
	// 1502 - 20 = 1482 left; a quote of 1502 must wait 20 units = 20 ms.
	next := *f.snap
	next.Generation, next.Permissions = 2, next.Permissions|1<<5
	must(t, f.e.Install(&next))
	_, d = f.admit([]WorkItem{{Op: 3, Count: 3}}, t0)
	if d.Reason != DenyRateLimited || d.RetryAfter != 20e6 {
		t.Fatalf("weighted: %+v", d)
	}
}

func TestQuoteAboveBurstIsUnpriceableNotThrottled(t *testing.T) {
	f := newFixture(t, nil)
	// Bypass validation to build the case validation exists to prevent: a
	// republished burst below a quote the table can produce.
	s := *f.snap
	s.Generation, s.Limits.UnitBurst = 2, 50
	a := f.e.accounts["acme"]
	p := compilePolicy(&s)
	a.snap, a.pinned, a.hot = &s, &p, p
	if _, d := f.admit(oneReq, t0); d.Reason != DenyUnpriceableUnderLimits {
		t.Fatalf("quote 102 over burst 50: %+v", d)
	}
}

func TestConcurrencyPrincipalThenAccount(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) { s.Limits.MaxConcurrent, s.Limits.PrincipalMaxConcurrent = 3, 2 })
	var held []Reservation
	for range 2 {
		r, d := f.admit(oneReq, t0)
		if d.Denied() {
			t.Fatal(d)
		}
		held = append(held, r)
	}
	if _, d := f.admit(oneReq, t0); d.Reason != DenyConcurrencyLimited || d.RetryAfter <= 0 {
		t.Fatalf("alice third: %+v", d)
	}
	ctx, _ := f.e.Begin(bob, 0, t0)
	r, d := f.e.Admit(&ctx, oneReq, f.usage, t0)
	if d.Denied() {
		t.Fatalf("bob first: %+v", d)
	}
	ctx, _ = f.e.Begin(bob, 0, t0)
	if _, d := f.e.Admit(&ctx, oneReq, f.usage, t0); d.Reason != DenyConcurrencyLimited {
		t.Fatalf("account ceiling: %+v", d)
	}
	if pe := f.e.principals.get(bob); pe.inflight != 1 {
		t.Fatalf("refused admit left bob's gauge at %d", pe.inflight)
	}
	f.e.Cancel(r, t0+40e6)
	if _, d := f.admit(oneReq, t0); d.Reason != DenyConcurrencyLimited {
		t.Fatal("alice's own ceiling ignored")
	}
	f.e.Cancel(held[0], t0)
	if _, d := f.admit(oneReq, t0); d.Denied() {
		t.Fatalf("slot freed but refused: %+v", d)
	}
	f.conserved()
}

func TestLeaseRefusalsAndRefillSignal(t *testing.T) {
	f := newFixture(t, nil)
	l, _ := f.e.Lease("acme")
	l.TakeUnspent()
	_, d := f.admit(oneReq, t0)
	if d.Reason != DenyLeaseExhausted || d.Remaining != 0 || d.Reason.Retry() != RetryTransient {
		t.Fatalf("empty lease: %+v", d)
	}
	reqs := f.e.DrainRefills(nil)
	if len(reqs) != 1 || reqs[0].Account != "acme" || reqs[0].Needed != 102 {
		t.Fatalf("refill requests: %+v", reqs)
	}
	if again := f.e.DrainRefills(nil); len(again) != 0 {
		t.Fatalf("drained twice: %+v", again)
	}
	must(t, f.e.GrantLease("acme", 2, 102, t0+10, 0))
	if l.LargestRefused() != 0 || l.WantsRefill() {
		t.Fatal("grant did not clear the refusal record")
	}
	if _, d := f.admit(oneReq, t0+10); d.Reason != DenyLeaseExpired {
		t.Fatalf("past usable window: %+v", d)
	}
	r, d := f.admit(oneReq, t0)
	if d.Denied() {
		t.Fatalf("exact fit refused: %+v", d)
	}
	f.e.Cancel(r, t0)
	f.conserved()

	g := NewEngine(Config{})
	must(t, g.Install(validSnapshot()))
	must(t, g.Bind(alice, "acme"))
	ctx, _ := g.Begin(alice, 0, t0)
	if _, d := g.Admit(&ctx, oneReq, &recorder{}, t0); d.Reason != DenyLeaseUnavailable {
		t.Fatalf("no lease at all: %+v", d)
	}
}

func TestLowWaterCrossingSignalsRefill(t *testing.T) {
	f := newFixture(t, nil)
	must(t, f.e.GrantLease("acme", 1, 0, t0+3600e9, 1_000_000-150))
	f.e.DrainRefills(nil)
	r := f.start(oneReq, t0) // 1,000,000 → 999,898: above low water
	if reqs := f.e.DrainRefills(nil); len(reqs) != 0 {
		t.Fatalf("signalled above low water: %+v", reqs)
	}
	f.e.Finish(r, 102, t0)
	f.start(oneReq, t0) // crosses 999,850
	if reqs := f.e.DrainRefills(nil); len(reqs) != 1 || reqs[0].Needed != 0 {
		t.Fatalf("crossing debit did not signal: %+v", reqs)
	}
}

func TestFundingEvidenceTurnsLeaseRefusalFinal(t *testing.T) {
	f := newFixture(t, nil)
	cell := new(EvidenceCell)
	must(t, f.e.SetEvidence("acme", cell))
	l, _ := f.e.Lease("acme")
	l.TakeUnspent()

	if _, d := f.admit(oneReq, t0); d.Reason != DenyLeaseExhausted {
		t.Fatalf("no evidence: %+v", d)
	}
	cell.Store(FundingEvidence{Remaining: 0, ResetAt: t0 + 100, PeriodEnd: t0 + 100, Scope: ScopeWorkspace, Next: 1000, Ceiling: MaxCostUnits})
	_, d := f.admit(oneReq, t0)
	if d.Reason != DenyBalanceExhausted || d.Scope != ScopeWorkspace || d.ResetAt != t0+100 || d.Reason.Retry() != RetryNever {
		t.Fatalf("exhausted: %+v", d)
	}
	cell.Store(FundingEvidence{Remaining: 50, ResetAt: t0 + 100, PeriodEnd: t0 + 100, Scope: ScopeAgent, Next: 1000, Ceiling: MaxCostUnits})
	if _, d := f.admit(oneReq, t0); d.Reason != DenyBalanceInsufficient || d.Remaining != 50 {
		t.Fatalf("insufficient: %+v", d)
	}
	if _, d := f.admit([]WorkItem{{Op: 0, Count: 10}}, t0); d.Reason != DenyLeaseExhausted {
		t.Fatalf("a quote within remaining must stay transient: %+v", d)
	}
	if _, d := f.admit(oneReq, t0+100); d.Reason != DenyLeaseExhausted {
		t.Fatalf("evidence past its period end used: %+v", d)
	}
	cell.Clear()
	if _, d := f.admit(oneReq, t0); d.Reason != DenyLeaseExhausted {
		t.Fatalf("cleared evidence used: %+v", d)
	}
	f.conserved()
}

func TestCommitRefusedWhenFundingLapsed(t *testing.T) {
	f := newFixture(t, nil)
	must(t, f.e.GrantLease("acme", 1, 0, t0+100, 0))
	r, _ := f.admit(oneReq, t0)
	f.e.AcquireCapacity(r)
	err := f.e.Commit(r, RequestID{}, t0+100)
	if !errors.Is(err, ErrFundingExpiredAtStart) || ReasonOf(err) != DenyFundingExpiredAtStart {
		t.Fatalf("commit after lapse: %v", err)
	}
	c := f.e.Counters()
	if c.RefusedAtStart != 1 || c.CommitRefusals != 1 || c.Started != 0 {
		t.Fatalf("counters: %+v", c)
	}
	if got := f.lease(); got.Held != 0 || got.Billed != 0 {
		t.Fatalf("refused start charged: %+v", got)
	}
	if f.usage.released != 1 || len(f.usage.events) != 0 {
		t.Fatal("usage slot not released exactly once")
	}
	f.conserved()
}

func TestElasticOverage(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) { s.Mode = EnforcementMode{Elastic: true, OverageCap: 250} })
	l, _ := f.e.Lease("acme")
	l.TakeUnspent()
	a := f.start(oneReq, t0)
	b := f.start(oneReq, t0)
	if _, d := f.admit(oneReq, t0); d.Reason != DenyOverageCapExhausted {
		t.Fatalf("past cap: %+v", d)
	}
	f.e.Finish(a, 40, t0)
	f.e.Finish(b, 102, t0)
	if got := f.e.Overage("acme"); got != 142 {
		t.Fatalf("overage = %d, want 142 billed", got)
	}
	for _, ev := range f.usage.events {
		if ev.Source != SourceOverage || ev.FencingToken != 0 {
			t.Fatalf("overage event names a lease: %+v", ev)
		}
	}
	// A leased reservation whose window lapses before start falls back.
	must(t, f.e.GrantLease("acme", 2, 1000, t0+10, 0))
	r, _ := f.admit(oneReq, t0)
	f.e.AcquireCapacity(r)
	if err := f.e.Commit(r, RequestID{}, t0+10); err != nil {
		t.Fatalf("elastic commit after lapse: %v", err)
	}
	if got := f.lease(); got.Held != 0 || got.Available != 1000 {
		t.Fatalf("fallback left the lease holding: %+v", got)
	}
	f.e.Finish(r, 100, t0+20)
	if ev := f.usage.events[len(f.usage.events)-1]; ev.Source != SourceOverage {
		t.Fatalf("fallback billed to the lease: %+v", ev)
	}
	f.conserved()
}

func TestCapacityGateReserveOnlyForAssured(t *testing.T) {
	f := newFixture(t, func(_ *Snapshot, c *Config) { c.Gate = NewReservedGate(2, 1) })
	best := *validSnapshot()
	best.Account, best.Capacity = "cheap", CapacityBestEffort
	must(t, f.e.Install(&best))
	must(t, f.e.GrantLease("cheap", 1, 10_000, t0+3600e9, 0))
	carol := Principal{Hi: 3}
	must(t, f.e.Bind(carol, "cheap"))
	admitCarol := func() Reservation {
		ctx, _ := f.e.Begin(carol, 0, t0)
		r, d := f.e.Admit(&ctx, oneReq, f.usage, t0)
		if d.Denied() {
			t.Fatal(d)
		}
		return r
	}
	first := admitCarol()
	if err := f.e.AcquireCapacity(first); err != nil {
		t.Fatalf("shared pool refused: %v", err)
	}
	second := admitCarol()
	if err := f.e.AcquireCapacity(second); ReasonOf(err) != DenyCapacityUnavailable {
		t.Fatalf("best effort reached the reserve: %v", err)
	}
	if got, _ := f.e.Lease("cheap"); got.Balance().Held != 102 {
		t.Fatalf("shed reservation kept its funding: %+v", got.Balance())
	}
	r, _ := f.admit(oneReq, t0)
	if err := f.e.AcquireCapacity(r); err != nil {
		t.Fatalf("assured refused the reserve: %v", err)
	}
	if s, res := f.e.gate.InUse(); s != 1 || res != 1 {
		t.Fatalf("gate in use = %d, %d", s, res)
	}
	f.e.Cancel(r, t0)
	f.e.Cancel(first, t0)
	if s, res := f.e.gate.InUse(); s != 0 || res != 0 {
		t.Fatalf("permits leaked: %d, %d", s, res)
	}
	if c := f.e.Counters(); c.Shed != 1 || c.TerminalSum() != c.Admitted {
		t.Fatalf("counters: %+v", c)
	}
}

func TestReservationTableFullRefuses(t *testing.T) {
	f := newFixture(t, func(_ *Snapshot, c *Config) { c.MaxReservations = 2 })
	f.admit(oneReq, t0)
	f.admit(oneReq, t0)
	if _, d := f.admit(oneReq, t0); d.Reason != DenyCapacityUnavailable {
		t.Fatalf("full table: %+v", d)
	}
	f.conserved()
}

func TestExpireReleasesPendingAndBillsLapsedCommits(t *testing.T) {
	f := newFixture(t, nil)
	ctx, _ := f.e.Begin(alice, 0, t0)
	ctx.SetTTL(1e9)
	pending, _ := f.e.Admit(&ctx, oneReq, f.usage, t0)
	ctx, _ = f.e.Begin(alice, 0, t0)
	ctx.SetTTL(2e9)
	committed, _ := f.e.Admit(&ctx, oneReq, f.usage, t0)
	f.e.AcquireCapacity(committed)
	f.e.Commit(committed, RequestID{Lo: 42}, t0)
	live := f.start(oneReq, t0) // default 30 s hold

	if n := f.e.Expire(t0 + 1e9 - 1); n != 0 {
		t.Fatalf("expired %d early", n)
	}
	if n := f.e.Expire(t0 + 2e9); n != 2 {
		t.Fatalf("expired %d, want 2", n)
	}
	if err := f.e.Commit(pending, RequestID{}, t0); !errors.Is(err, ErrUnknownReservation) {
		t.Fatalf("expired pending still commits: %v", err)
	}
	if len(f.usage.events) != 1 {
		t.Fatalf("%d events", len(f.usage.events))
	}
	ev := f.usage.events[0]
	if !ev.Lapsed || ev.Units != 102 || ev.RequestID.Lo != 42 || ev.OccurredAt != t0+2e9 {
		t.Fatalf("lapsed bill: %+v", ev)
	}
	c := f.e.Counters()
	if c.Lapsed != 1 || c.ExpiredPending != 1 || c.Cancelled != 1 || c.Started != 2 {
		t.Fatalf("counters: %+v", c)
	}
	if n := f.e.Expire(t0 + 2e9 + 1); n != 0 {
		t.Fatal("swept again inside the sweep interval")
	}
	if _, err := f.e.Finish(live, 1, t0+3e9); err != nil {
		t.Fatal(err)
	}
	f.conserved()
}

func TestEndAllReleasesPendingAndBillsCommittedAtShutdown(t *testing.T) {
	f := newFixture(t, nil)
	pending, _ := f.admit(oneReq, t0)
	ctx, _ := f.e.Begin(alice, 0, t0)
	committed, _ := f.e.Admit(&ctx, oneReq, f.usage, t0)
	f.e.AcquireCapacity(committed)
	f.e.Commit(committed, RequestID{Lo: 7}, t0)
	if n := f.e.EndAll(); n != 2 {
		t.Fatalf("ended %d, want 2", n)
	}
	if err := f.e.Commit(pending, RequestID{}, t0); !errors.Is(err, ErrUnknownReservation) {
		t.Fatalf("ended pending still commits: %v", err)
	}
	if len(f.usage.events) != 1 || !f.usage.events[0].Lapsed || f.usage.events[0].Units != 102 {
		t.Fatalf("events %+v", f.usage.events)
	}
	if n := f.e.EndAll(); n != 0 {
		t.Fatalf("second EndAll ended %d", n)
	}
	f.conserved()
}

// TestOnlyAQuoteTheEvidenceAllowsBecomesANeed: a quote the evidence rules
// out (402) is no need for the next grant — the shard would otherwise ask
// the control plane to fund a request that was already answered, and keep
// asking for it while smaller requests wait — and one within the evidence
// is (it waits for funding).
func TestOnlyAQuoteTheEvidenceAllowsBecomesANeed(t *testing.T) {
	f := newFixture(t, nil)
	cell := new(EvidenceCell)
	must(t, f.e.SetEvidence("acme", cell))
	l, _ := f.e.Lease("acme")
	l.TakeUnspent()
	cell.Store(FundingEvidence{Remaining: 50, ResetAt: t0 + 100, PeriodEnd: t0 + 100, Scope: ScopeOrg, Next: 1000, Ceiling: MaxCostUnits})
	big := []WorkItem{{Op: 0, Count: 60}}
	if _, d := f.admit(big, t0); d.Reason != DenyBalanceInsufficient {
		t.Fatalf("a quote beyond the evidence: %+v", d)
	}
	if got := l.LargestRefused(); got != 0 {
		t.Fatalf("a quote refused 402 became a need of %d", got)
	}
	if _, d := f.admit([]WorkItem{{Op: 0, Count: 10}}, t0); d.Reason != DenyLeaseExhausted {
		t.Fatalf("a quote within the evidence: %+v", d)
	}
	if got, want := l.LargestRefused(), CostUnits(20); got != want || !l.WantsRefill() { // the quote of 10 items
		t.Fatalf("a waiting quote's need: %d (wants refill %v), want %d", got, l.WantsRefill(), want)
	}
	f.conserved()
}
