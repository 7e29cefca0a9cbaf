package funding

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

// These tests drive the machine as etcd's raft tests drive theirs: inputs
// in (Refill, Return, Settle, Done, Evidence, Recall, Tick), then the
// outbox asserted — grants and messages per shard, ledger calls, evidence
// published, announcements. No clock, no goroutine, no sleep.

// outbox records what the machine asks of its shell.
type outbox struct {
	grants    []grant
	sends     []sent
	calls     []Call
	published []core.FundingEvidence
	wants     []core.AccountID
	returned  []core.AccountID
}

type grant struct {
	shard int
	units core.CostUnits
	token uint64
}

type sent struct {
	shard int
	kind  message.InKind
}

func (o *outbox) Grant(i int, m message.Inbound) bool {
	o.grants = append(o.grants, grant{i, m.Units, m.Token})
	return true
}
func (o *outbox) Send(i int, m message.Inbound) { o.sends = append(o.sends, sent{i, m.Kind}) }
func (o *outbox) Call(c Call)                   { o.calls = append(o.calls, c) }
func (o *outbox) Publish(_ core.AccountID, ev core.FundingEvidence) {
	o.published = append(o.published, ev)
}
func (o *outbox) Want(id core.AccountID, _ core.CostUnits) { o.wants = append(o.wants, id) }
func (o *outbox) Returned(id core.AccountID)               { o.returned = append(o.returned, id) }

// take empties the outbox and returns what it held.
func (o *outbox) take() outbox {
	was := *o
	*o = outbox{}
	return was
}

const t0 = int64(1_700_000_000e9)

// fixture is a machine of three shards funding account "acme".
type fixture struct {
	t   *testing.T
	m   *Machine
	out *outbox
	now int64
}

func newFixture(t *testing.T, cfg Config) *fixture {
	cfg.Shards = 3
	if cfg.MinLease == 0 {
		cfg.MinLease = 100
	}
	if cfg.MinSlice == 0 {
		cfg.MinSlice = 10
	}
	f := &fixture{t: t, out: &outbox{}, now: t0}
	f.m = New(cfg, f.out)
	f.m.Install("acme", core.ScopeOrg, nil, true, f.now)
	return f
}

// call returns the only ledger call of the outbox, of kind k.
func (f *fixture) call(o outbox, k CallKind) Call {
	f.t.Helper()
	if len(o.calls) != 1 || o.calls[0].Kind != k {
		f.t.Fatalf("want one %s call, the outbox holds %+v", k, o.calls)
	}
	return o.calls[0]
}

// lease acquires a lease of granted units, short when the ledger granted
// less than asked, with evidence remaining; shard 0 asked for it.
func (f *fixture) lease(granted, remaining core.CostUnits, short bool) outbox {
	f.t.Helper()
	f.m.Refill(0, "acme", 0, 0, f.now)
	c := f.call(f.out.take(), CallAcquire)
	if !short {
		granted = max(granted, c.Want)
	}
	f.m.Done(Result{ID: c.ID, Lease: Grant{ID: 1, Token: 1, Granted: granted, ExpiresAt: f.now + 60e9},
		Evidence: core.FundingEvidence{Remaining: remaining}, HasEvidence: true}, f.now)
	return f.out.take()
}

func TestARefillIsFundedFromANewLease(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.lease(1000, 1000, false)
	if len(o.grants) != 1 || o.grants[0].shard != 0 || o.grants[0].units == 0 || o.grants[0].token != 1 {
		t.Fatalf("grants %+v", o.grants)
	}
	if len(o.published) != 1 || o.published[0].Remaining != 1000 {
		t.Fatalf("published %+v", o.published)
	}
}

// TestTheLastUnitsAreGatheredForTheShardThatNeedsThem: near exhaustion
// (a short lease), a shard whose need the pool cannot cover while other
// shards' slices can is served by asking those slices back — not its own
// — and granted from what returns.
func TestTheLastUnitsAreGatheredForTheShardThatNeedsThem(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.lease(30, 30, true) // the ledger had only 30
	g0 := o.grants[0].units
	f.m.Refill(1, "acme", 0, 0, f.now)
	o = f.out.take()
	if len(o.grants) != 1 || o.grants[0].shard != 1 {
		t.Fatalf("shard 1's slice: %+v", o.grants)
	}
	g1 := o.grants[0].units
	// Shard 2 needs 25: the pool holds 30-g0-g1, the others' slices the rest.
	f.m.Refill(2, "acme", 25, 0, f.now)
	o = f.out.take()
	var asked []int
	for _, s := range o.sends {
		if s.kind == message.InReclaimLease {
			asked = append(asked, s.shard)
		}
	}
	if !slices.Equal(asked, []int{0, 1}) || len(o.grants) != 0 {
		t.Fatalf("gathered from %v (want [0 1]) and granted %+v (want nothing yet)", asked, o.grants)
	}
	f.m.Return(0, "acme", 1, g0, f.now)
	f.m.Return(1, "acme", 1, g1, f.now)
	o = f.out.take()
	if len(o.grants) != 1 || o.grants[0].shard != 2 || o.grants[0].units < 25 {
		t.Fatalf("after the returns: grants %+v, want shard 2 funded with at least 25", o.grants)
	}
}

// TestAShardAtLowWaterIsNoGatherTarget: the ledger has no more, and the
// last unit sits in shard 2's slice while shards 0 and 1 wait for one unit
// each. Shard 2, at low water, asks for more with no request waiting
// there (need 0): it must not become the gather's target — that would end
// the waits of shards 0 and 1 with the unit they need still in shard 2's
// slice. Shard 2's slice is asked back, and the unit funds a waiting shard.
func TestAShardAtLowWaterIsNoGatherTarget(t *testing.T) {
	f := newFixture(t, Config{})
	f.lease(3, 3, true) // the ledger's last 3 units: one per shard
	f.m.Refill(1, "acme", 0, 0, f.now)
	f.m.Refill(2, "acme", 0, 0, f.now)
	if o := f.out.take(); len(o.grants) != 2 {
		t.Fatalf("slices of the last units: %+v, want one each for shards 1 and 2", o.grants)
	}
	f.m.Settle(0, f.m.Drawn("acme", 1), 1, f.now)
	f.m.Settle(1, f.m.Drawn("acme", 1), 1, f.now)
	// Shard 2 at low water: the node asks the ledger, which has no more.
	f.m.Refill(2, "acme", 0, 1, f.now)
	c := f.call(f.out.take(), CallExtend)
	f.m.Done(Result{ID: c.ID, Lease: Grant{ID: 1, Token: 1, Granted: 3, ExpiresAt: f.now + 60e9},
		Evidence: core.FundingEvidence{Remaining: 3}, HasEvidence: true}, f.now)
	f.out.take()
	// Shards 0 and 1 wait for a unit each; shard 2 asks again.
	f.m.Refill(0, "acme", 1, 1, f.now)
	f.m.Refill(1, "acme", 1, 1, f.now)
	f.m.Refill(2, "acme", 0, 1, f.now)
	o := f.out.take()
	if !slices.Contains(o.sends, sent{2, message.InReclaimLease}) {
		t.Fatalf("sends %+v: want shard 2's slice asked back for the waiting shards", o.sends)
	}
	f.m.Return(2, "acme", 1, 1, f.now) // shard 2's answer
	o = f.out.take()
	if len(o.grants) != 1 || o.grants[0].shard == 2 || o.grants[0].units != 1 {
		t.Fatalf("after shard 2 returned the last unit: grants %+v, want it granted to shard 0 or 1", o.grants)
	}
}

// lastThree leases the ledger's last 3 units, a slice of one for each
// shard, and spends shard 0's and shard 1's: the last unit is shard 2's.
func (f *fixture) lastThree() {
	f.t.Helper()
	f.lease(3, 3, true)
	f.m.Refill(1, "acme", 0, 0, f.now)
	f.m.Refill(2, "acme", 0, 0, f.now)
	if o := f.out.take(); len(o.grants) != 2 {
		f.t.Fatalf("slices of the last units: %+v, want one each for shards 1 and 2", o.grants)
	}
	f.m.Settle(0, f.m.Drawn("acme", 1), 1, f.now)
	f.m.Settle(1, f.m.Drawn("acme", 1), 1, f.now)
	f.out.take()
}

// gathers lists the shards o asks to hand their slices back.
func gathers(o outbox) []int {
	var asked []int
	for _, s := range o.sends {
		if s.kind == message.InReclaimLease {
			asked = append(asked, s.shard)
		}
	}
	return asked
}

// TestAGatherThatFoundTheUnitsReservedFundsTheWaitWhenTheyComeBack: the
// last unit sits in shard 2's slice, under a reservation the machine does
// not see. Shard 1 waits for a unit; the gather brings nothing, so its wait
// ends (the unit exists: no 402). When the reservation releases the unit,
// shard 2 returns it unasked (core.LeaseSlot.Reclaim): shard 1 wants again
// and is funded with it, instead of the unit sitting in the pool while
// shard 1's requests answer 503.
func TestAGatherThatFoundTheUnitsReservedFundsTheWaitWhenTheyComeBack(t *testing.T) {
	f := newFixture(t, Config{})
	f.lastThree()
	f.m.Refill(1, "acme", 1, 1, f.now)
	if asked := gathers(f.out.take()); !slices.Equal(asked, []int{2}) {
		t.Fatalf("gathered from %v, want [2]", asked)
	}
	f.now += 20e6 // the gather's answers are in: nothing came back
	f.m.Refill(1, "acme", 1, 1, f.now)
	o := f.out.take()
	if asked := gathers(o); len(asked) != 0 || len(o.grants) != 0 {
		t.Fatalf("a fruitless gather asked again (%v) or granted %+v", asked, o.grants)
	}
	for _, c := range o.calls { // the ledger has no more
		f.m.Done(Result{ID: c.ID, Lease: Grant{ID: 1, Token: 1, Granted: 3, ExpiresAt: f.now + 60e9},
			Evidence: core.FundingEvidence{Remaining: 1}, HasEvidence: true}, f.now)
	}
	f.out.take()
	f.m.Return(2, "acme", 1, 1, f.now) // the reservation released it
	if o := f.out.take(); !slices.Equal(o.grants, []grant{{1, 1, 1}}) {
		t.Fatalf("after shard 2 returned the last unit: grants %+v, want it granted to shard 1", o.grants)
	}
}

// TestAGrantAfterAFruitlessGatherLetsTheNextOneGo: a gather that brought
// nothing is not tried again until something moves; a grant is a move.
// Here the gather for shard 1 finds the last unit reserved in shard 2,
// which then spends it; the ledger finds one more unit, which goes to
// shard 0 at low water. Shard 1's wait must gather it from shard 0 — the
// lease holds as many units out as when the first gather went, but they
// are not the same units.
func TestAGrantAfterAFruitlessGatherLetsTheNextOneGo(t *testing.T) {
	f := newFixture(t, Config{})
	f.lastThree()
	f.m.Refill(1, "acme", 1, 1, f.now)
	if asked := gathers(f.out.take()); !slices.Equal(asked, []int{2}) {
		t.Fatalf("gathered from %v, want [2]", asked)
	}
	f.m.Settle(2, f.m.Drawn("acme", 1), 1, f.now) // it was reserved: spent
	f.now += 20e6
	f.m.Refill(0, "acme", 0, 1, f.now) // shard 0 at low water: the node asks the ledger
	c := f.call(f.out.take(), CallExtend)
	f.m.Done(Result{ID: c.ID, Lease: Grant{ID: 1, Token: 1, Granted: 4, ExpiresAt: f.now + 60e9},
		Evidence: core.FundingEvidence{Remaining: 1}, HasEvidence: true}, f.now)
	o := f.out.take()
	if !slices.Equal(o.grants, []grant{{0, 1, 1}}) {
		t.Fatalf("grants %+v: want the ledger's last unit in shard 0's slice", o.grants)
	}
	if asked := gathers(o); !slices.Equal(asked, []int{0}) {
		t.Fatalf("gathered from %v, want [0] for shard 1: the unit shard 0 was granted since the last gather", asked)
	}
	f.m.Return(0, "acme", 1, 1, f.now)
	if o := f.out.take(); !slices.Equal(o.grants, []grant{{1, 1, 1}}) {
		t.Fatalf("after shard 0 returned the unit: grants %+v, want it granted to shard 1", o.grants)
	}
}

// TestAFruitlessGatherForOneShardDoesNotPauseTheNext: a gather for
// shard 1 asks shard 2, whose unit turns out reserved and is spent; it
// never asked shard 1's own slice, which holds the last unit. When shard
// 2 then waits for one unit, that slice is asked back for it: the pause
// after a fruitless gather holds only for the target it was made for.
func TestAFruitlessGatherForOneShardDoesNotPauseTheNext(t *testing.T) {
	f := newFixture(t, Config{})
	f.lease(3, 3, true)
	f.m.Refill(1, "acme", 0, 0, f.now)
	f.m.Refill(2, "acme", 0, 0, f.now)
	f.out.take()
	f.m.Settle(0, f.m.Drawn("acme", 1), 1, f.now)
	f.m.Refill(1, "acme", 1, 1, f.now) // a 2-unit quote, one unit in its slice
	if asked := gathers(f.out.take()); !slices.Equal(asked, []int{2}) {
		t.Fatalf("gathered from %v for shard 1, want [2]", asked)
	}
	f.m.Settle(2, f.m.Drawn("acme", 1), 1, f.now) // it was reserved: spent
	f.now += 20e6
	f.m.Refill(2, "acme", 1, 1, f.now) // a 1-unit quote waits in shard 2
	if asked := gathers(f.out.take()); !slices.Equal(asked, []int{1}) {
		t.Fatalf("gathered from %v for shard 2, want [1]: the last unit is in shard 1's slice", asked)
	}
}

// TestAQuoteTheEvidenceRulesOutIsNoNeed: a shard's word on its need lags
// until its next grant; a need above the evidence is no need. Here the
// node holds all that is left (40): shard 1's need of 1210, already
// refused 402, counts as 40, which the other shard's slice and the pool
// cover — they are gathered for it, instead of the pool being handed to
// it as if nothing could ever cover its need.
func TestAQuoteTheEvidenceRulesOutIsNoNeed(t *testing.T) {
	f := newFixture(t, Config{})
	f.lease(40, 40, true)
	f.m.Refill(1, "acme", 1210, 0, f.now)
	o := f.out.take()
	if !slices.Contains(o.sends, sent{0, message.InReclaimLease}) || len(o.grants) != 0 {
		t.Fatalf("sends %+v, grants %+v: want shard 0's slice asked back for shard 1", o.sends, o.grants)
	}
}

// TestANeedIsNetOfTheUnitsTheShardHolds: the account's last 2 units are
// sliced one each to shards 0 and 1. Shard 1 refused a 3-unit quote (402
// since: only 2 are left) and a 2-unit one now waits there; its word on
// its need lags until its next grant: 3, less the unit it holds. No
// payable quote there needs more than the unit beyond its own slice, so
// shard 0's unit is gathered for it — left at 2, the need would look out
// of reach of everything the node holds, and the 2-unit request, which
// the account can pay, would wait until its deadline and be answered 503.
func TestANeedIsNetOfTheUnitsTheShardHolds(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.lease(2, 2, true) // the ledger's last 2 units
	if len(o.grants) != 1 || o.grants[0].shard != 0 || o.grants[0].units != 1 {
		t.Fatalf("shard 0's slice: %+v, want 1 unit", o.grants)
	}
	f.m.Refill(1, "acme", 0, 0, f.now)
	if o = f.out.take(); len(o.grants) != 1 || o.grants[0].shard != 1 || o.grants[0].units != 1 {
		t.Fatalf("shard 1's slice: %+v, want 1 unit", o.grants)
	}
	f.m.Refill(1, "acme", 3-1, 1, f.now)
	o = f.out.take()
	if !slices.Contains(o.sends, sent{0, message.InReclaimLease}) || len(o.grants) != 0 {
		t.Fatalf("sends %+v, grants %+v: want shard 0's slice asked back for shard 1", o.sends, o.grants)
	}
	f.m.Return(0, "acme", 1, 1, f.now) // shard 0's answer
	o = f.out.take()
	if len(o.grants) != 1 || o.grants[0].shard != 1 || o.grants[0].units != 1 {
		t.Fatalf("after shard 0 returned its unit: grants %+v, want it granted to shard 1", o.grants)
	}
}

// TestSpendingNearExhaustionLowersTheEvidence: with a short lease, every
// unit spent lowers what the shards read (the ledger counts it only once
// it is exported), so a request it no longer covers is refused 402 at
// once instead of waiting.
func TestSpendingNearExhaustionLowersTheEvidence(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.lease(10, 10, true) // the ledger's last 10 units
	g := o.grants[0].units
	f.m.Settle(0, f.m.Drawn("acme", 1), g, f.now) // shard 0 spent them
	o = f.out.take()
	if len(o.published) != 1 || o.published[0].Remaining != 10-g {
		t.Fatalf("after spending %d of 10, published %+v", g, o.published)
	}
}

// TestAFleetNodeAsksForWhatOtherNodesHold: the evidence says units exist
// that neither this node's lease nor the ledger's balance holds — other
// nodes' leases do. One call verifies it, then the node asks the others
// for them (Want) and the shard stops waiting until they come back.
func TestAFleetNodeAsksForWhatOtherNodesHold(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.lease(10, 50, true) // 10 here, 40 in other nodes' leases
	g := o.grants[0].units
	f.m.Settle(0, f.m.Drawn("acme", 1), g, f.now)
	f.out.take()
	f.m.Refill(0, "acme", 20, 1, f.now) // a quote of 20 waits; the pool has 10-g
	o = f.out.take()
	if len(o.grants) != 1 || o.grants[0].units != 10-g {
		t.Fatalf("the pool's last units: %+v", o.grants)
	}
	ext := f.call(o, CallExtend)
	f.m.Done(Result{ID: ext.ID, Lease: Grant{ID: 1, Token: 1, Granted: 10, Used: g, ExpiresAt: f.now + 60e9},
		Evidence: core.FundingEvidence{Remaining: 50 - g}, HasEvidence: true}, f.now)
	f.out.take()
	f.m.Settle(0, f.m.Drawn("acme", 1), 10-g, f.now) // the slice is spent too
	f.m.Refill(0, "acme", 20, 2, f.now)
	o = f.out.take()
	if !slices.Equal(o.wants, []core.AccountID{"acme"}) || len(o.calls) != 0 {
		t.Fatalf("wants %v, calls %+v: want the other nodes asked, the ledger left alone (it just answered)", o.wants, o.calls)
	}
	f.m.Returned("acme", f.now) // another node released units
	f.call(f.out.take(), CallExtend)
}

// TestARecallHandsTheLeaseBackAndYields: another node asks for the
// account's units; the lease is handed back (its slices asked back, then
// released with exactly what is unspent), the release is announced, and
// this node asks the ledger for itself again only after Recall.
func TestARecallHandsTheLeaseBackAndYields(t *testing.T) {
	f := newFixture(t, Config{Recall: 10e6})
	o := f.lease(1000, 1000, false)
	g := o.grants[0].units
	f.m.Recall("acme", "node-b", 0, f.now)
	o = f.out.take()
	if !slices.Contains(o.sends, sent{0, message.InRetireLease}) {
		t.Fatalf("shard 0 was not asked for its slice: %+v", o.sends)
	}
	f.m.Refill(0, "acme", 5, 1, f.now) // this node wants again at once
	f.m.Return(0, "acme", 1, g, f.now)
	o = f.out.take()
	rel := f.call(o, CallRelease)
	if rel.Unspent != 1000 {
		t.Fatalf("released with %d unspent, want 1000", rel.Unspent)
	}
	f.m.Done(Result{ID: rel.ID}, f.now)
	o = f.out.take()
	if !slices.Equal(o.returned, []core.AccountID{"acme"}) || len(o.calls) != 0 {
		t.Fatalf("after the release: returned %v, calls %+v (want the announcement, no call yet)", o.returned, o.calls)
	}
	f.now += 10e6
	f.m.Tick(f.now)
	f.call(f.out.take(), CallAcquire) // the yield is over
}

// TestAReleaseWaitsForTheExtensionInFlight: a lease handed back while an
// extension of it is out is released only once the answer is in, with
// what the extension added: released earlier, the units it added would
// be lost.
func TestAReleaseWaitsForTheExtensionInFlight(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.lease(100, 1000, false)
	g := o.grants[0].units
	f.m.Refill(0, "acme", 500, 1, f.now) // more than the pool: an extension
	ext := f.call(f.out.take(), CallExtend)
	f.m.Recall("acme", "node-b", 0, f.now)
	f.m.Return(0, "acme", 1, g, f.now)
	if o := f.out.take(); len(o.calls) != 0 {
		t.Fatalf("released while the extension was out: %+v", o.calls)
	}
	f.m.Done(Result{ID: ext.ID, Lease: Grant{ID: 1, Token: 1, Granted: ext.Want + 100, ExpiresAt: f.now + 60e9},
		Evidence: core.FundingEvidence{Remaining: 1000}, HasEvidence: true}, f.now)
	rel := f.call(f.out.take(), CallRelease)
	if rel.Unspent != ext.Want+100 {
		t.Fatalf("released %d unspent, want %d (with what the extension added)", rel.Unspent, ext.Want+100)
	}
}

// TestEvidenceReadBeforeTheMachinesIsIgnored: a refresh that began before
// the evidence the machine holds was read is stale (it may predate a
// deposit), and must not lower what the shards read.
func TestEvidenceReadBeforeTheMachinesIsIgnored(t *testing.T) {
	f := newFixture(t, Config{})
	f.lease(100, 1000, false)
	f.m.Evidence("acme", core.FundingEvidence{Remaining: 3}, t0-1, f.now)
	if o := f.out.take(); len(o.published) != 0 {
		t.Fatalf("stale evidence published: %+v", o.published)
	}
	f.m.Evidence("acme", core.FundingEvidence{Remaining: 3}, t0+1, f.now)
	if o := f.out.take(); len(o.published) != 1 || o.published[0].Remaining != 3 {
		t.Fatalf("fresh evidence: %+v", o.published)
	}
}

// TestADepositAfterTheExportCaughtUpIsNews: the ledger's Remaining counts
// what this node spent but has not exported yet, so it falls when the
// exporter catches up. A deposit smaller than that fall still shows a
// Remaining lower than the last one, yet above what this node knows is
// left: it is news, published as the ledger says — not ignored while every
// request is refused 402 on the node's own estimate of nothing.
func TestADepositAfterTheExportCaughtUpIsNews(t *testing.T) {
	f := newFixture(t, Config{})
	o := f.lease(100, 600, true) // the ledger's last units
	g := o.grants[0].units
	f.m.Settle(0, f.m.Drawn("acme", 1), g, f.now) // spent, not yet exported
	f.out.take()
	if g < 2 {
		t.Fatalf("a slice of %d units", g)
	}
	// The exporter billed what was spent, then 1 unit was deposited: the
	// ledger now says 600 - g + 1.
	f.m.Evidence("acme", core.FundingEvidence{Remaining: 600 - g + 1}, t0+1, f.now)
	o = f.out.take()
	if len(o.published) != 1 || o.published[0].Remaining != 600-g+1 {
		t.Fatalf("after a deposit, published %+v: want the ledger's %d", o.published, 600-g+1)
	}
}

// TestALeaseAcquiredDuringShutdownGoesBack: an acquire still out when
// HandBackAll runs (shutdown) brings its lease after it. That lease funds
// no shard and goes straight back to the ledger, and a shard asking for
// funding then asks the ledger nothing: once the node has stopped, no
// lease is left out (found by a daemon that, under load, kept its lease
// through SIGTERM until the lease expired).
func TestALeaseAcquiredDuringShutdownGoesBack(t *testing.T) {
	f := newFixture(t, Config{})
	f.m.Refill(0, "acme", 0, 0, f.now)
	c := f.call(f.out.take(), CallAcquire)
	f.m.HandBackAll(f.now)
	if f.m.Quiet() {
		t.Fatal("quiet with an acquire out")
	}
	f.m.Done(Result{ID: c.ID, Lease: Grant{ID: 1, Token: 1, Granted: c.Want, ExpiresAt: f.now + 60e9},
		Evidence: core.FundingEvidence{Remaining: 1000}, HasEvidence: true}, f.now)
	o := f.out.take()
	if len(o.grants) != 0 {
		t.Fatalf("a lease acquired after HandBackAll funded shards: %+v", o.grants)
	}
	rel := f.call(o, CallRelease)
	if rel.Lease != 1 || rel.Unspent != c.Want {
		t.Fatalf("release %+v: want lease 1 with all %d units unspent", rel, c.Want)
	}
	f.m.Done(Result{ID: rel.ID}, f.now)
	f.out.take()
	if !f.m.Quiet() {
		t.Fatal("not quiet once the late lease is released")
	}
	f.m.Refill(1, "acme", 0, 0, f.now)
	for f.now += 1e9; f.now < t0+10e9; f.now += 1e9 {
		f.m.Tick(f.now)
	}
	if o := f.out.take(); len(o.calls) != 0 {
		t.Fatalf("after HandBackAll, a refill asked the ledger: %+v", o.calls)
	}
}

// TestAFailingReleaseBacksOff: a release the ledger does not answer is
// asked again after Retry, then twice as long, and so on: a ledger out of
// reach for a minute costs a few calls, not one a second.
func TestAFailingReleaseBacksOff(t *testing.T) {
	f := newFixture(t, Config{Retry: 1e9})
	o := f.lease(100, 1000, false)
	f.m.HandBackAll(f.now)
	f.m.Return(0, "acme", 1, o.grants[0].units, f.now)
	var at []int64
	for range 4 {
		rel := f.call(f.out.take(), CallRelease)
		at = append(at, f.now)
		f.m.Done(Result{ID: rel.ID, Outcome: Failed, Detail: "unreachable"}, f.now)
		f.out.take()
		for f.now = f.m.Next(); ; f.now = f.m.Next() {
			f.m.Tick(f.now)
			if o := *f.out; len(o.calls) > 0 {
				break
			}
		}
	}
	gaps := fmt.Sprint(at[1]-at[0], " ", at[2]-at[1], " ", at[3]-at[2])
	if at[1]-at[0] < 1e9 || at[2]-at[1] < 2e9 || at[3]-at[2] < 4e9 {
		t.Fatalf("retries after %s ns: want 1 s, 2 s, 4 s", gaps)
	}
}

// TestAFailingAcquireBacksOffUntilTheLedgerAnswers: while the ledger is
// out of reach, a shard whose clients keep asking for funding costs an
// acquire after Retry, then twice as long, and so on — a minute's outage
// costs a few calls, not one a second — and the ledger's first answer to
// anything asks again at once, so the back-off does not outlast the
// outage.
func TestAFailingAcquireBacksOffUntilTheLedgerAnswers(t *testing.T) {
	f := newFixture(t, Config{Retry: 1e9})
	f.m.Install("beta", core.ScopeOrg, nil, true, f.now)
	var at []int64
	for end := f.now + 20e9; f.now < end; f.now += 100e6 {
		f.m.Refill(0, "acme", 5, 0, f.now) // a client's request waits
		f.m.Tick(f.now)
		for _, c := range f.out.take().calls {
			at = append(at, f.now)
			f.m.Done(Result{ID: c.ID, Outcome: Failed, Detail: "unreachable"}, f.now)
		}
	}
	if len(at) < 4 || at[1]-at[0] < 1e9 || at[2]-at[1] < 2e9 || at[3]-at[2] < 4e9 {
		t.Fatalf("%d acquires in 20 s, at %v: want them after 1 s, 2 s, 4 s", len(at), at)
	}
	f.out.take()
	// The ledger answers another account's call: acme asks again now.
	f.m.Refill(0, "beta", 5, 0, f.now)
	c := f.call(f.out.take(), CallAcquire)
	f.m.Done(Result{ID: c.ID, Lease: Grant{ID: 2, Token: 2, Granted: c.Want, ExpiresAt: f.now + 60e9},
		Evidence: core.FundingEvidence{Remaining: 1000}, HasEvidence: true}, f.now)
	var acme []Call
	for _, c := range f.out.take().calls {
		if c.Account == "acme" {
			acme = append(acme, c)
		}
	}
	if len(acme) != 1 || acme[0].Kind != CallAcquire {
		t.Fatalf("after the ledger answered: acme's calls %+v, want one acquire at once", acme)
	}
}
