//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/internal/pgtest"
)

// TestFleetCost measures what a fleet costs its database, with one node
// and then two on one durable PostgreSQL of their own: durable /v1/check
// from loadConns connections per node for benchWindow after a second of
// warm-up, in alternating rounds, then, over the window, checks per second, ledger transactions
// per second (pg_stat_database), PostgreSQL's CPU per 1,000 checks, and
// checks per tollgated CPU-second (the hot path's cost per node). It is a
// measurement, not a test: it runs only with TOLLGATED_FLEET_BENCH=1
// (make bench-fleet) and its figures are in BENCHMARKS.md.
func TestFleetCost(t *testing.T) {
	if os.Getenv("TOLLGATED_FLEET_BENCH") != "1" {
		t.Skip("a measurement: run with TOLLGATED_FLEET_BENCH=1 (make bench-fleet)")
	}
	const loadConns, benchWindow = 8, 5 * time.Second
	cluster := pgtest.Own(t, pgtest.Options{Durable: true})
	url := cluster.URL()
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(t.Context())
	commits := func() int64 {
		// Counters reach pg_stat_database when a backend's transaction
		// ends, at most once a second: read them after a pause.
		time.Sleep(1100 * time.Millisecond)
		var n int64
		if err := db.QueryRow(t.Context(), `SELECT xact_commit + xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Rounds alternate one node and two, so that the machine's other work
	// weighs on both alike. Each node has one shard, pinned to a CPU of
	// its own (node i to CPU i), so the two-node rounds add a node, not
	// two processes' shards contending for the same CPUs.
	//
	// The closed-loop rounds saturate the machine: two nodes share what one
	// had, so each serves half the checks and its fixed costs (a
	// settlement every 100 ms, group commits, the plane's timers) weigh
	// twice as much per check. The paced rounds offer each node the same
	// pacedRate either way: a check's cost on a node — the hot path — must
	// not depend on how many nodes there are.
	const pacedRate = 3000 // checks/s per node
	for round, r := range []struct{ nodes, rate int }{{1, 0}, {2, 0}, {1, 0}, {2, 0},
		{1, pacedRate}, {2, pacedRate}, {1, pacedRate}, {2, pacedRate}} {
		n := r.nodes
		nodes := make([]*proc, n)
		for i := range nodes {
			nodes[i] = startProc(t, t.TempDir(), fleetFlags(url, 10*round+i, "--cpus", fmt.Sprint(i))...)
		}
		account := fmt.Sprintf("bench-%d", round)
		key := nodes[0].provision(account, 1_000_000_000, 1)
		stop := make(chan struct{})
		loads := make([]*acked, n)
		for i, p := range nodes {
			var pace <-chan struct{}
			if r.rate > 0 {
				pace = pacer(stop, r.rate)
			}
			loads[i] = loadPaced(context.Background(), stop, p.listen, key, loadConns, 5*time.Second, pace)
		}
		time.Sleep(time.Second)
		count := func() (c int) {
			for _, a := range loads {
				c += a.count()
			}
			return c
		}
		ticks := func() (c int) {
			for _, p := range nodes {
				c += p.cpuTicks()
			}
			return c
		}
		// The window runs from one read of the transaction counter to the
		// next; the counts of checks and CPU are taken at the same moments.
		tx0 := commits()
		cpu0, checks0, ticks0, start := cluster.CPU(), count(), ticks(), time.Now()
		time.Sleep(benchWindow)
		tx1 := commits()
		cpu1, checks1, ticks1, elapsed := cluster.CPU(), count(), ticks(), time.Since(start)
		close(stop)
		for _, a := range loads {
			a.wait()
		}
		for _, p := range nodes {
			p.stop()
		}
		checks := float64(checks1 - checks0)
		secs := elapsed.Seconds()
		pgCPU := float64(cpu1 - cpu0)
		nodeCPU := float64(ticks1-ticks0) * 0.01 // seconds
		offered := "closed loop"
		if r.rate > 0 {
			offered = fmt.Sprintf("paced at %d/s per node", r.rate)
		}
		t.Logf("%d node(s), %d connections each, %s, %.1f s: %.0f checks/s, %.1f ledger transactions/s (%.2f per 1,000 checks), "+
			"PostgreSQL CPU %.1f ms per 1,000 checks (%.1f%% of one CPU), %.0f checks per tollgated CPU-second (%.1f µs per check)",
			n, loadConns, offered, secs, checks/secs, float64(tx1-tx0)/secs, float64(tx1-tx0)/checks*1000,
			pgCPU/float64(time.Millisecond)/checks*1000, pgCPU/float64(elapsed)*100, checks/nodeCPU, nodeCPU/checks*1e6)
	}
}

// pacer hands out rate tokens a second, in slices of 10 ms, until stop
// closes; tokens nobody took within a slice are dropped.
func pacer(stop <-chan struct{}, rate int) <-chan struct{} {
	const slice = 10 * time.Millisecond
	per := max(1, rate*int(slice)/int(time.Second))
	tokens := make(chan struct{}, per)
	go func() {
		t := time.NewTicker(slice)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for range per {
				select {
				case tokens <- struct{}{}:
				default:
				}
			}
		}
	}()
	return tokens
}
