package control

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

const rateLimits = `"request_rate":2000,"request_burst":200`

// TestRateLimitIsExactAcrossShards: with the account limited to R
// requests/s (burst B), traffic spread over every shard never gets more than
// R×t + B admitted.
func TestRateLimitIsExactAcrossShards(t *testing.T) {
	nd := newNode(t, 4, LeaseConfig{TTL: time.Minute})
	nd.open("acme", "key-acme", 1<<40, rateLimits)
	nd.waitStatus(0, "key-acme", 200, await.Default)
	start := time.Now()
	got := nd.hammer([]int{0, 1, 2, 3}, "key-acme", 1500*time.Millisecond)
	elapsed := time.Since(start).Seconds()
	bound := int64(2000*elapsed) + 200 + 1 // +1: the probe above
	if got > bound {
		t.Fatalf("admitted %d > R×t+B = %d over %.2fs across 4 shards", got, bound, elapsed)
	}
	if got < bound/4 {
		t.Fatalf("admitted only %d of a possible %d: shares never moved", got, bound)
	}
	t.Logf("admitted %d of at most %d (%.0f%%) over %.2fs", got, bound, 100*float64(got)/float64(bound), elapsed)
}

// TestOneShardCanUseNearlyTheWholeLimit: when all traffic lands on one
// shard, shares move to it and it admits at least 90% of R×t.
func TestOneShardCanUseNearlyTheWholeLimit(t *testing.T) {
	nd := newNode(t, 4, LeaseConfig{TTL: time.Minute})
	nd.open("acme", "key-acme", 1<<40, rateLimits)
	nd.waitStatus(2, "key-acme", 200, await.Default)
	nd.hammer([]int{2}, "key-acme", 300*time.Millisecond) // let the shares follow the traffic
	start := time.Now()
	got := nd.hammer([]int{2}, "key-acme", 1500*time.Millisecond)
	elapsed := time.Since(start).Seconds()
	if floor := int64(0.9 * 2000 * elapsed); got < floor {
		t.Fatalf("one shard admitted %d < 90%% of R×t = %d", got, floor)
	}
	if st := nd.stats(); st.Shares.Rebalances == 0 {
		t.Fatalf("no rebalance happened: %+v", st.Shares)
	}
}

// TestFundingFollowsTrafficToOneShard: units sliced to idle shards come
// back for the busy one, so one shard can spend the whole balance, and
// never more.
func TestFundingFollowsTrafficToOneShard(t *testing.T) {
	nd := newNode(t, 3, LeaseConfig{TTL: time.Minute})
	nd.open("acme", "key-acme", 100, "")
	admitted, last, body := nd.spend([]int{1}, "key-acme", 10*time.Second)
	if admitted != 100 || last != 402 {
		t.Fatalf("one shard admitted %d of a balance of 100; last %d %s", admitted, last, body)
	}
}

// TestLedgerFundsEveryUnitAndThenAnswers402: with the whole balance spread
// over node leases and shard slices, every unit can be spent — none is
// stranded in a retired lease or an idle shard — then the shards answer
// 402 balance-exhausted, and the ledger bills exactly what was admitted.
func TestLedgerFundsEveryUnitAndThenAnswers402(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute, MinLease: 4000})
	nd.open("acme", "key-acme", 25_000, "")
	admitted, last, body := nd.spend([]int{0, 1}, "key-acme", 20*time.Second)
	if last != 402 || !bytes.Contains(body, []byte("balance-exhausted")) {
		acct, _ := nd.store.Account(context.Background(), "acme")
		st, b := nd.check(0, "key-acme", 1)
		t.Fatalf("after %d admitted: last answer %d %s; plane %+v; exporter %+v; ledger %+v; now %d %s", admitted, last, body, nd.stats(), nd.exporter.Stats(), acct, st, b)
	}
	if admitted != 25_000 {
		t.Fatalf("admitted %d of a balance of 25000", admitted)
	}
	if err := nd.exporter.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	acct, _ := nd.store.Account(context.Background(), "acme")
	if acct.Settled != 25_000 || acct.Loss != 0 {
		t.Fatalf("ledger: settled %d loss %d", acct.Settled, acct.Loss)
	}
	if err := nd.store.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("funding: %+v", nd.stats().Funding)
}

// TestSuspensionReachesEveryShardWithin100ms: a status change published
// through the Provisioner (as the admin API does) is pushed to the shards:
// every shard refuses the account's next request within 100 ms, and a
// reactivation admits again as fast.
func TestSuspensionReachesEveryShardWithin100ms(t *testing.T) {
	nd := newNode(t, 3, LeaseConfig{TTL: time.Minute})
	nd.open("acme", "key-acme", 1_000_000, "")
	for i := range nd.shards {
		nd.waitStatus(i, "key-acme", 200, await.Default)
	}
	for _, st := range []struct {
		status core.Status
		want   int
	}{{core.StatusSuspended, 403}, {core.StatusActive, 200}} {
		acct, err := nd.store.SetStatus(context.Background(), "acme", st.status)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := nd.prov.AccountChanged(acct); err != nil {
			t.Fatal(err)
		}
		for i := range nd.shards {
			nd.waitStatus(i, "key-acme", st.want, 100*time.Millisecond-time.Since(start))
		}
		t.Logf("status %v on all shards %v after the ledger change", st.status, time.Since(start))
	}
}

// TestSuspendingAScopeStopsEveryAccountBelowIt: suspending an org stops
// its agent at once with 403 account-suspended naming the org's scope;
// reactivating it admits again.
func TestSuspendingAScopeStopsEveryAccountBelowIt(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute})
	ctx := context.Background()
	now := time.Now().UnixNano()
	for _, spec := range []ledger.AccountSpec{{ID: "org"}, {ID: "ws", Parent: "org", Unmetered: true}} {
		if _, _, err := nd.store.CreateAccount(ctx, spec, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := nd.store.Deposit(ctx, "org", 1_000_000, "d", now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := nd.store.CreateAccount(ctx, ledger.AccountSpec{ID: "agent", Parent: "ws", Unmetered: true}, now); err != nil {
		t.Fatal(err)
	}
	nd.open("lone", "key-lone", 10, "") // a bystander
	if _, err := nd.store.SetPolicy(ctx, "agent", []byte(sprintfPolicy(""))); err != nil {
		t.Fatal(err)
	}
	nd.bindKey("agent", "key-agent")
	nd.waitStatus(0, "key-agent", 200, await.Default)
	for _, c := range []struct {
		status core.Status
		want   int
		scope  string
	}{{core.StatusSuspended, 403, `"scope":"org"`}, {core.StatusActive, 200, ""}} {
		org, err := nd.store.SetStatus(ctx, "org", c.status)
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.prov.AccountChanged(org); err != nil {
			t.Fatal(err)
		}
		for i := range nd.shards {
			nd.waitStatus(i, "key-agent", c.want, time.Second)
		}
		if _, body := nd.check(1, "key-agent", 1); !bytes.Contains(body, []byte(c.scope)) {
			t.Fatalf("%v: %s does not name %s", c.status, body, c.scope)
		}
	}
}

// bindKey adds key for id through the ledger and the provisioner.
func (nd *node) bindKey(id core.AccountID, key string) {
	nd.t.Helper()
	ctx := context.Background()
	acct, err := nd.store.Account(ctx, id)
	if err != nil {
		nd.t.Fatal(err)
	}
	if err := nd.prov.AccountChanged(acct); err != nil {
		nd.t.Fatal(err)
	}
	h, _ := newTestHasher()
	d, _ := h.Digest([]byte(key))
	if err := nd.store.AddKey(ctx, ledger.Key{ID: "k-" + key, Account: id, Digest: d}); err != nil {
		nd.t.Fatal(err)
	}
	nd.prov.BindKey(d, id)
}

// TestAQuoteAboveTheLeaseGrowsIt: a quote larger than the node lease is
// funded by extending that lease to the quote, not by a second lease.
func TestAQuoteAboveTheLeaseGrowsIt(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute, MinLease: 1000})
	nd.open("acme", "key-acme", 1_000_000, "")
	nd.waitStatus(0, "key-acme", 200, await.Default)
	var st int
	var body []byte
	if !await.Poll(await.Default, func() bool { st, body = nd.check(0, "key-acme", 50_000); return st == 200 }) {
		t.Fatalf("a 50,000-unit quote never funded: %d %s", st, body)
	}
	active, err := nd.store.Leases(context.Background(), true)
	if err != nil || len(active) != 1 || active[0].Granted < 50_000 {
		t.Fatalf("active leases %+v (%v): want one, grown to the quote", active, err)
	}
	if f := nd.stats().Funding; f.Acquired != 1 || f.Extended == 0 {
		t.Fatalf("funding %+v: want one lease, extended", f)
	}
}

// TestAnUnfundableQuoteDoesNotStarveSmallOnes: a quote larger than the
// whole balance is refused 402 balance-insufficient, and requests that fit
// keep being admitted.
func TestAnUnfundableQuoteDoesNotStarveSmallOnes(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute, MinLease: 1000})
	nd.open("acme", "key-acme", 20_000, "")
	nd.waitStatus(0, "key-acme", 200, await.Default)
	var st int
	var body []byte
	refused := await.Poll(await.Default, func() bool {
		st, body = nd.check(0, "key-acme", 50_000)
		return st == 200 || st == 402 && bytes.Contains(body, []byte("balance-insufficient"))
	})
	if !refused || st == 200 {
		t.Fatalf("a quote above the balance: %d %s", st, body)
	}
	for i := range nd.shards {
		nd.waitStatus(i, "key-acme", 200, await.Default)
	}
}

// TestAnIdleAccountsLeaseIsHandedBackOnce: after one request, an account
// that sees no more traffic hands its lease back once and then causes no
// ledger call at all.
func TestAnIdleAccountsLeaseIsHandedBackOnce(t *testing.T) {
	const ttl = 300 * time.Millisecond
	clock := newTestClock()
	nd := newNodeOn(t, 2, LeaseConfig{TTL: ttl}, clock.Now)
	nd.open("acme", "key-acme", 100_000, "")
	nd.waitStatus(0, "key-acme", 200, await.Default)
	// idle moves the clock through lifetimes a quarter of one at a time,
	// letting the plane finish what each step asks of it (a renewal, a
	// hand-back) before the next.
	idle := func(lifetimes int) {
		for range 4 * lifetimes {
			nd.settle()
			clock.Advance(ttl / 4)
			nd.plane.Kick()
		}
		nd.settle()
	}
	idle(2)
	// The hand-back asks the shards for their slices first: it ends when
	// they answer, which no clock decides.
	await.True(t, "the idle lease released", func() bool { return nd.stats().Funding.Released != 0 })
	nd.settle()
	before := nd.stats().Funding
	idle(3)
	after := nd.stats().Funding
	t.Logf("after two idle lifetimes: %+v; three more later: %+v", before, after)
	if before.Released != 1 || after != before {
		t.Fatalf("an idle account's lease: released %d, then %+v → %+v", before.Released, before, after)
	}
	if active, _ := nd.store.Leases(context.Background(), true); len(active) != 0 {
		t.Fatalf("still active: %+v", active)
	}
	acct, _ := nd.store.Account(context.Background(), "acme")
	if acct.Loss != 0 || acct.Outstanding != 0 {
		t.Fatalf("handed back with loss %d, outstanding %d", acct.Loss, acct.Outstanding)
	}
}

// TestAStoppedPlaneTurnsPublishersAway: a publisher that races the node's
// shutdown — a fleet follower refreshing funding, the provisioner — used to
// wait forever for a plane whose loop had ended, and the node never
// exited. Once Run has returned, Do and FundingChanged return at once and
// a provisioning change is ErrStopped.
func TestAStoppedPlaneTurnsPublishersAway(t *testing.T) {
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	inR, _ := ring.New[message.Inbound](16)
	outR, _ := ring.New[message.Outbound](16)
	in, _ := ring.NewDoorbell(inR)
	out, _ := ring.NewDoorbell(outR)
	p, err := New(Config{Store: store, Spool: &memSpool{}, Holder: "test-node", Lease: LeaseConfig{TTL: time.Minute}},
		[]Link{{In: in, Out: out, Durable: new(shard.DurableMark)}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() { p.Run(stop); close(ran) }()
	did := false
	p.do(func(*plane.Machine, int64) { did = true })
	if !did {
		t.Fatal("a running plane did not run a command")
	}
	close(stop)
	<-ran
	done := make(chan error, 1)
	go func() {
		p.FundingChanged(map[core.AccountID]core.FundingEvidence{"acme": {Remaining: 1}}, 0)
		p.do(func(*plane.Machine, int64) { t.Error("a stopped plane ran a command") })
		for range 2000 { // more than the command queue holds
			p.post(func() {})
		}
		done <- p.Install(&core.Snapshot{Account: "acme"})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("Install on a stopped plane: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a publisher still waits for a plane that stopped")
	}
}

// TestPlaneSaysWhileASyncHoldsUsage: shard.SpoolSyncing is true from the
// pass that appends a check's usage until a pass after the spool made it
// durable. A shard about to block does not ring the plane while it is true
// (shard.HandOver): the plane passes over every ring when the sync ends.
func TestPlaneSaysWhileASyncHoldsUsage(t *testing.T) {
	nd := newNode(t, 1, LeaseConfig{TTL: time.Minute})
	nd.open("acme", "key-acme", 1_000_000, "")
	nd.waitStatus(0, "key-acme", 200, await.Default)
	await.True(t, "no sync in flight once the spool is durable", func() bool { return !nd.syncing.Load() })

	nd.spool.hold()
	if st, body := nd.check(0, "key-acme", 1); st != 200 {
		t.Fatalf("check: %d %s", st, body)
	}
	nd.plane.Kick()
	await.True(t, "a sync in flight once the usage is appended", nd.syncing.Load)
	// The plane is the flag's one writer: clear it on the plane's
	// goroutine, and the pass that follows must say again that the sync
	// is in flight.
	nd.plane.do(func(*plane.Machine, int64) { nd.syncing.Set(false) })
	nd.plane.Kick()
	await.True(t, "a later pass to say the held sync is in flight (it has not ended)", nd.syncing.Load)
	nd.spool.release()
	nd.plane.Kick() // as the daemon's OnDurable does
	await.True(t, "no sync in flight once it ended", func() bool { return !nd.syncing.Load() })
}

// TestAKeyForAnUnknownAccountIsNeverSent: BindInstalledKey refuses an
// account the plane never installed, sending nothing (a shard would find
// it a broken invariant), and binds one it did.
func TestAKeyForAnUnknownAccountIsNeverSent(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute, MinLease: 1000})
	nd.open("acme", "key-acme", 1_000_000, "")
	nd.waitStatus(0, "key-acme", 200, await.Default)
	h, _ := newTestHasher()
	d, _ := h.Digest([]byte("key-ghost"))
	if err := nd.plane.BindInstalledKey(d, "ghost"); !errors.Is(err, plane.ErrUnknownAccount) {
		t.Fatalf("a key for an unknown account: %v, want ErrUnknownAccount", err)
	}
	d, _ = h.Digest([]byte("key-acme-2"))
	if err := nd.plane.BindInstalledKey(d, "acme"); err != nil {
		t.Fatal(err)
	}
	for i := range nd.shards {
		nd.waitStatus(i, "key-acme-2", 200, await.Default)
	}
}
