package control

import (
	"context"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
)

// TestMaintenanceForgetsEventIDsAfterTheRetention: the ledger remembers a
// billed event's id for the provisioner's retention and no longer, so it
// does not grow with every event ever billed.
func TestMaintenanceForgetsEventIDsAfterTheRetention(t *testing.T) {
	ln := newNode(t, 1, LeaseConfig{TTL: time.Minute})
	ln.open("acme", "key-acme", 1000, "")
	prov := ln.prov
	ctx := context.Background()
	ingestedAt := time.Now().UnixNano()
	post := []ledger.Usage{{ID: [16]byte{7}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1}}
	if _, err := ln.store.Ingest(ctx, post, ingestedAt); err != nil {
		t.Fatal(err)
	}
	prov.ForgetEvery = time.Nanosecond // every pass: this test is about the retention's edge, not the cadence
	prov.EventRetention = 0            // unset: the default, not "forget everything"
	prov.Now = func() int64 { return ingestedAt + int64(time.Hour) + 1 }
	if _, err := prov.MaintainOnce(); err != nil {
		t.Fatal(err)
	}
	if res, err := ln.store.Ingest(ctx, post, ingestedAt+int64(time.Hour)); err != nil || res[0] != ledger.Duplicate {
		t.Fatalf("with the retention unset, an hour-old id was forgotten: %v %v", res, err)
	}
	prov.EventRetention = time.Hour
	for _, c := range []struct {
		at   int64
		want ledger.IngestResult
	}{
		{ingestedAt + int64(time.Hour), ledger.Duplicate}, // the id's last moment
		{ingestedAt + int64(time.Hour) + 1, ledger.Accepted},
	} {
		prov.Now = func() int64 { return c.at }
		if _, err := prov.MaintainOnce(); err != nil {
			t.Fatal(err)
		}
		res, err := ln.store.Ingest(ctx, post, c.at)
		if err != nil || res[0] != c.want {
			t.Fatalf("re-sent %v after ingest: %v %v, want %v", time.Duration(c.at-ingestedAt), res, err, c.want)
		}
		if c.want == ledger.Accepted {
			return
		}
	}
}

// forgetCounter counts the forgetting transactions maintenance asks for.
type forgetCounter struct {
	ledger.Store
	calls int
}

func (f *forgetCounter) ForgetEvents(ctx context.Context, before int64, limit int) (int, error) {
	f.calls++
	return f.Store.ForgetEvents(ctx, before, limit)
}

// TestMaintenanceForgetsOnItsOwnCadence: maintenance passes once a second
// for three minutes forget event ids three times, not 180: forgetting was a
// ledger transaction a second on every node of a fleet, for housekeeping
// against a retention of days.
func TestMaintenanceForgetsOnItsOwnCadence(t *testing.T) {
	ln := newNode(t, 1, LeaseConfig{TTL: time.Minute})
	counter := &forgetCounter{Store: ln.store}
	prov := NewProvisioner(ln.prov.plane, counter)
	start := time.Now().UnixNano()
	for s := range int64(180) {
		prov.Now = func() int64 { return start + s*int64(time.Second) }
		if _, err := prov.MaintainOnce(); err != nil {
			t.Fatal(err)
		}
	}
	if counter.calls != 3 {
		t.Fatalf("180 passes a second apart forgot %d times, want 3 (once a minute)", counter.calls)
	}
}

// TestRefreshReachesTheWholeTreeThroughTheIndex: a change to an account
// refreshes it and every account below it, found through the ledger's
// children index, and usage anywhere in a tree refreshes from its root.
func TestRefreshReachesTheWholeTreeThroughTheIndex(t *testing.T) {
	ln := newNode(t, 1, LeaseConfig{TTL: time.Minute})
	ln.open("org", "key-org", 0, "")
	prov := ln.prov
	ctx := context.Background()
	for _, spec := range []ledger.AccountSpec{
		{ID: "ws", Parent: "org", Unmetered: true}, {ID: "a1", Parent: "ws"}, {ID: "a2", Parent: "ws"}, {ID: "lone"},
	} {
		if _, _, err := ln.store.CreateAccount(ctx, spec, time.Now().UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	tree, err := prov.subtree(ctx, "org")
	if err != nil || len(tree) != 4 || tree[0] != "org" || tree[1] != "ws" || tree[2] != "a1" || tree[3] != "a2" {
		t.Fatalf("subtree of org: %v, %v", tree, err)
	}
	if root, err := prov.rootOf(ctx, "a2"); root != "org" || err != nil {
		t.Fatalf("root of a2: %q, %v", root, err)
	}
	if _, err := prov.subtree(ctx, "nobody"); err == nil {
		t.Fatal("subtree of an unknown account")
	}
}

// TestKeysUsedReachTheLedger: a key that authenticates on a shard gets its
// last use recorded in the ledger, off the request path (the shard marks
// its credential cache, the plane batches the reports, the provisioner
// maps them to key ids); a key nobody used keeps none.
func TestKeysUsedReachTheLedger(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{})
	nd.open("used", "key-used-0123456789", 1000, "")
	nd.open("idle", "key-idle-0123456789", 1000, "")
	before := time.Now().UnixNano()
	nd.waitStatus(1, "key-used-0123456789", 200, await.Default)
	lastUsed := func() map[string]int64 {
		ks, err := nd.store.Keys(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, k := range ks {
			out[k.ID] = k.LastUsed
		}
		return out
	}
	var got map[string]int64
	if !await.Poll(await.Default, func() bool { got = lastUsed(); return got["k-used"] != 0 }) {
		t.Fatalf("last use never recorded: %v", got)
	}
	if got["k-used"] < before {
		t.Fatalf("last use %d, before the check at %d", got["k-used"], before)
	}
	if got["k-idle"] != 0 {
		t.Fatalf("an unused key has a last use: %v", got)
	}
}

// TestEvidenceRefreshesKeepARefusedAccountsBackOff: a fleet republishes an
// org's evidence whenever anyone under it settles. Each such refresh used
// to reset the back-off of an account the ledger had refused, so an
// exhausted account hammered by clients cost a ledger call per refresh
// (40 in 2 s against 1 without). Evidence that shows no more money is not
// news: the back-off stands.
func TestEvidenceRefreshesKeepARefusedAccountsBackOff(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute, MinLease: 40})
	nd.open("acme", "key-acme", 100, "")
	if _, last, _ := nd.spend([]int{0, 1}, "key-acme", 10*time.Second); last != 402 {
		t.Fatalf("not exhausted: %d", last)
	}
	calls := func() uint64 {
		f := nd.stats().Funding
		return f.Acquired + f.Extended + f.Refused + f.Errors
	}
	nd.settle() // the calls the exhaustion made are answered: count from here
	before := calls()
	stop := make(chan struct{})
	refreshed := make(chan int)
	go func() {
		n := 0
		defer func() { refreshed <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if err := nd.prov.RefreshFunding(context.Background(), []core.AccountID{"acme"}); err != nil {
					t.Error(err)
				}
				n++
			}
		}
	}()
	nd.hammer([]int{0, 1}, "key-acme", 2*time.Second)
	close(stop)
	n := <-refreshed
	// The back-off alone allows a few calls in 2 s (it starts short and
	// doubles); a call per refresh would be about n.
	if got := calls() - before; got > 8 {
		t.Fatalf("an exhausted account made %d ledger calls in 2 s of load and %d unchanged evidence refreshes", got, n)
	} else {
		t.Logf("%d ledger calls in 2 s of load and %d unchanged evidence refreshes", got, n)
	}
}
