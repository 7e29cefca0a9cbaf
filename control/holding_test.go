package control

import (
	"context"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
)

// TestHoldingCountsTheLeasesAnAccountFunds: a lease of a child account is
// paid by every metered ancestor too (ledger: each funder of the chain pays
// the grant and gets the unspent units back), so what this node holds
// unspent for the child is also held for its parent. Without it an org's
// "available" drops by a whole lease the moment one of its workspaces
// makes a single request (GET /v1/accounts/{id}, funds).
func TestHoldingCountsTheLeasesAnAccountFunds(t *testing.T) {
	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute})
	ctx := context.Background()
	now := time.Now().UnixNano()
	for _, spec := range []ledger.AccountSpec{{ID: "org"}, {ID: "ws", Parent: "org"}} {
		if _, _, err := nd.store.CreateAccount(ctx, spec, now); err != nil {
			t.Fatal(err)
		}
		if _, _, err := nd.store.Deposit(ctx, spec.ID, 1_000_000, "d", now); err != nil {
			t.Fatal(err)
		}
		if _, err := nd.store.SetPolicy(ctx, spec.ID, []byte(sprintfPolicy(""))); err != nil {
			t.Fatal(err)
		}
	}
	nd.bindKey("ws", "key-ws")
	nd.waitStatus(0, "key-ws", 200, await.Default)

	// The shards report their spending asynchronously: read until the
	// holdings stand still.
	var ws, orgHeld core.CostUnits
	if !await.Poll(await.Default, func() bool {
		ws, orgHeld = nd.plane.Holding("ws"), nd.plane.Holding("org")
		return ws > 0 && orgHeld == ws && nd.plane.Holding("ws") == ws
	}) {
		t.Fatalf("held for org %d, for its workspace %d: the workspace's lease is funded by org too", orgHeld, ws)
	}
	org, err := nd.store.Account(ctx, "org")
	if err != nil {
		t.Fatal(err)
	}
	if held := nd.plane.Holding("org"); held > org.Outstanding {
		t.Fatalf("held for org %d, more than its outstanding %d", held, org.Outstanding)
	}

	// The org's own traffic adds its own lease.
	nd.bindKey("org", "key-org")
	nd.waitStatus(1, "key-org", 200, await.Default)
	if !await.Poll(await.Default, func() bool {
		ws, orgHeld = nd.plane.Holding("ws"), nd.plane.Holding("org")
		return orgHeld > ws && nd.plane.Holding("ws") == ws
	}) {
		t.Fatalf("held for org %d, for its workspace %d: the org's own lease is not counted", orgHeld, ws)
	}
}
