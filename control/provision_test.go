package control

import (
	"context"
	"testing"
	"time"

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
	prov.EventRetention = 0 // unset: the default, not "forget everything"
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
