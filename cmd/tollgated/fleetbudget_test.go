//go:build linux

package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/internal/pgtest"
)

// ledgerBudget is what one node of a fleet may cost its PostgreSQL, in
// transactions a second, whatever its request rate and however many nodes
// share the database (docs/FLEET.md, "Sizing PostgreSQL").
const ledgerBudget = 10

// budgetWindow is how long the budget test counts the database's
// transactions.
const budgetWindow = 8 * time.Second

// statsLag is how long PostgreSQL may hold a backend's transaction counts
// before they show in pg_stat_database: a backend that ends a transaction
// within a second of its last report reports again when it next ends one a
// second later, or after ten seconds idle.
const statsLag = 11 * time.Second

// TestAFleetNodeStaysWithinItsLedgerBudget: two nodes on one account,
// each under as much load as eight connections give it, cost PostgreSQL at
// most ledgerBudget transactions a second each (pg_stat_database's commits
// and rollbacks of the fleet's own database over budgetWindow), while every
// acknowledged check is billed once. Settling at a short interval whatever
// the load, and announcing every settlement to every node — each NOTIFY a
// transaction at every listening connection, and a read of the evidence on
// every node — cost several times the budget, more with every node added
// (BENCHMARKS.md). A busy machine serves fewer checks but cannot raise the
// count: every source of transactions runs on a cadence.
func TestAFleetNodeStaysWithinItsLedgerBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	url := pgtest.Database(t)
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	xacts := func() (n int64) {
		if err := db.QueryRow(t.Context(), `SELECT xact_commit + xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	nodes := startFleet(t, url, 2)
	started := time.Now()
	const id = "busy"
	key := nodes[0].provision(id, 1_000_000_000, 1)
	waitKnown(t, nodes[1], key)
	stop := make(chan struct{})
	loads := make([]*acked, len(nodes))
	for i, p := range nodes {
		loads[i] = loadPaced(context.Background(), stop, p.listen, key, 8, 5*time.Second, nil)
	}
	// The window opens once every node serves and has settled, and
	// statsLag after the last node started: what starting cost (migrating,
	// loading the ledger, provisioning) has then reached pg_stat_database,
	// and the counts the window's ends miss are a steady state's alike.
	for i, a := range loads {
		await.True(t, "load acknowledged", func() bool { return a.count() >= 200 })
		await.True(t, "a settlement", func() bool { return nodes[i].metric("tollgated_ledger_settlements_total") > 0 })
	}
	for tick := time.NewTicker(250 * time.Millisecond); time.Since(started) < statsLag; <-tick.C {
	}
	settled0 := ledgerCalls(nodes).settlements
	checks0 := loads[0].count() + loads[1].count()
	tx0, start := xacts(), time.Now()
	for tick := time.NewTicker(250 * time.Millisecond); time.Since(start) < budgetWindow; <-tick.C {
	}
	tx1, elapsed := xacts(), time.Since(start)
	settled1 := ledgerCalls(nodes).settlements
	checks := loads[0].count() + loads[1].count() - checks0
	close(stop)
	for _, a := range loads {
		a.wait()
	}
	for _, p := range nodes {
		p.stop()
	}
	perNode := float64(tx1-tx0) / elapsed.Seconds() / float64(len(nodes))
	t.Logf("%d checks in %v (%.0f/s), %d ledger transactions: %.1f a second per node, %.0f settlements",
		checks, elapsed.Round(time.Millisecond), float64(checks)/elapsed.Seconds(), tx1-tx0, perNode, settled1-settled0)
	if checks < 100 {
		t.Fatalf("only %d checks in the window: not a load", checks)
	}
	if settled1 == settled0 {
		t.Fatal("no settlement in the window: usage waits unbilled")
	}
	if perNode > ledgerBudget {
		t.Errorf("%.1f ledger transactions a second per node, budget %d", perNode, ledgerBudget)
	}
	settledOnce(t, url, id, loads, 0)
}
