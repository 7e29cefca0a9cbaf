//go:build linux

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/internal/pgtest"
)

// BenchmarkFleetCost measures what a fleet costs its database, on one durable
// PostgreSQL of its own: durable /v1/check from loadConns connections per
// node for benchWindow after a second of warm-up, then, over the window,
// checks per second, ledger transactions per second and per node
// (pg_stat_database), where they come from (the nodes' own counters:
// settlements, lease calls, funding refreshes; the rest is maintenance and
// the change log), PostgreSQL's CPU per 1,000 checks, and checks per
// tollgated CPU-second (the hot path's cost per node). Its rounds are
// timed windows, each once whatever b.N (make bench-fleet runs it with
// -benchtime 1x); its figures are in BENCHMARKS.md.
func BenchmarkFleetCost(b *testing.B) {
	t := b
	const loadConns, benchWindow = 8, 5 * time.Second
	cluster := pgtest.Own(t, pgtest.Options{Durable: true})
	url := cluster.URL()
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(t.Context())
	commits := func() (n, rollbacks int64) {
		// Counters reach pg_stat_database when a backend's transaction
		// ends, at most once a second: read them after a pause.
		time.Sleep(1100 * time.Millisecond)
		if err := db.QueryRow(t.Context(), `SELECT xact_commit + xact_rollback, xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&n, &rollbacks); err != nil {
			t.Fatal(err)
		}
		return n, rollbacks
	}
	// Each node has one shard, pinned to a CPU (node i to CPU i mod 2), so
	// the two-node rounds add a node, not two processes' shards contending
	// for the same CPUs.
	//
	// The paced rounds offer each node the same rate whatever the number
	// of nodes: a node's transactions at the database must not grow with
	// the rate, nor with the number of nodes; nor must a check's cost on a
	// node (the hot path). The closed-loop rounds saturate the machine: two
	// nodes share what one had.
	rounds := []struct{ nodes, rate int }{
		{1, 30}, {2, 30}, {4, 30},
		{1, 1000}, {2, 1000}, {4, 1000},
		{1, 3000}, {2, 3000},
		{1, 0}, {2, 0},
	}
	for round, r := range rounds {
		n := r.nodes
		nodes := make([]*proc, n)
		for i := range nodes {
			nodes[i] = startProc(t, t.TempDir(), fleetFlags(url, 10*round+i, "--cpus", fmt.Sprint(i%2))...)
		}
		account := fmt.Sprintf("bench-%d", round)
		key := nodes[0].provision(account, 1_000_000_000, 1)
		started := time.Now() // the last of starting's transactions
		stop := make(chan struct{})
		loads := make([]*acked, n)
		for i, p := range nodes {
			var pace <-chan struct{}
			if r.rate > 0 {
				pace = pacer(stop, r.rate)
			}
			loads[i] = loadPaced(context.Background(), stop, p.listen, key, loadConns, 5*time.Second, pace)
		}
		// The window opens statsLag after the last node started and the
		// account was provisioned: what starting cost (migrating, loading
		// the ledger, provisioning) has then reached pg_stat_database. Opened a second into the load,
		// an idle backend's start-up counts, reported ten seconds late,
		// fell into it: 13.4 a second for one node at closed loop, of
		// which the statement log showed about 6 in the window.
		time.Sleep(max(time.Second, statsLag-time.Since(started)))
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
		// next; the counts of checks, CPU and the nodes' own ledger calls
		// are taken at the same moments.
		tx0, rb0 := commits()
		cpu0, checks0, ticks0, calls0, start := cluster.CPU(), count(), ticks(), ledgerCalls(nodes), time.Now()
		time.Sleep(benchWindow)
		tx1, rb1 := commits()
		cpu1, checks1, ticks1, calls1, elapsed := cluster.CPU(), count(), ticks(), ledgerCalls(nodes), time.Since(start)
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
		tx := float64(tx1 - tx0)
		perNode := func(v float64) float64 { return v / secs / float64(n) }
		t.Logf("%d node(s), %d connections each, %s, %.1f s: %.0f checks/s, %.1f ledger transactions/s (%.1f rolled back), %.1f per node (%.2f per 1,000 checks); "+
			"per node a second: %.1f settlements, %.1f lease calls, %.1f funding refreshes, %.1f other; "+
			"PostgreSQL CPU %.1f ms per 1,000 checks (%.1f%% of one CPU), %.0f checks per tollgated CPU-second (%.1f µs per check)",
			n, loadConns, offered, secs, checks/secs, tx/secs, float64(rb1-rb0)/secs, perNode(tx), tx/checks*1000,
			perNode(calls1.settlements-calls0.settlements), perNode(calls1.leases-calls0.leases),
			perNode(calls1.refreshes-calls0.refreshes),
			perNode(tx-(calls1.settlements-calls0.settlements)-(calls1.leases-calls0.leases)-(calls1.refreshes-calls0.refreshes)),
			pgCPU/float64(time.Millisecond)/checks*1000, pgCPU/float64(elapsed)*100, checks/nodeCPU, nodeCPU/checks*1e6)
	}
}

// ledgerTraffic is what nodes count of their own calls to the ledger.
type ledgerTraffic struct{ settlements, leases, refreshes float64 }

// ledgerCalls sums the nodes' counters of settlements, lease operations and
// funding refreshes.
func ledgerCalls(nodes []*proc) (c ledgerTraffic) {
	for _, p := range nodes {
		m := p.scrape()
		c.settlements += sumSeries(m, "tollgated_ledger_settlements_total")
		c.leases += sumSeries(m, "tollgated_lease_operations_total{")
		c.refreshes += sumSeries(m, "tollgated_fleet_funding_refreshes_total{")
	}
	return c
}

// sumSeries adds up the values of the series of metrics text whose lines
// begin with prefix.
func sumSeries(text, prefix string) (sum float64) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// pacer hands out rate tokens a second, in slices of 10 ms (a rate below
// 100 a second carries its fractions over to the next slice), until stop
// closes; tokens nobody took within a slice are dropped.
func pacer(stop <-chan struct{}, rate int) <-chan struct{} {
	const slice = 10 * time.Millisecond
	tokens := make(chan struct{}, max(1, rate*int(slice)/int(time.Second)))
	go func() {
		t := time.NewTicker(slice)
		defer t.Stop()
		var owed int64 // tokens due times one second
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			owed += int64(rate) * int64(slice)
			for ; owed >= int64(time.Second); owed -= int64(time.Second) {
				select {
				case tokens <- struct{}{}:
				default:
				}
			}
		}
	}()
	return tokens
}
