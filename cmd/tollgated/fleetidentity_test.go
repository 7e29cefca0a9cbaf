//go:build linux

package main

// Node identity in a fleet: incarnations, the claim on a node id, a dead
// node's own grace, and the restoration of live nodes' forfeited leases.

import (
	"context"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/internal/pgtest"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// openFleetLedger opens the fleet's ledger for the test's own reads.
func openFleetLedger(t *testing.T, url string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), url, pgstore.Options{UsageHistory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// heldBy is what holder's active leases hold, and when the last of them may
// be forfeited (the lease's own grace, else grace).
func heldBy(t *testing.T, s ledger.Store, holder string, grace time.Duration) (leases int, units core.CostUnits, forfeitAt time.Time) {
	t.Helper()
	held, err := s.LeasesOf(t.Context(), holder)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range held {
		if l.State != ledger.LeaseActive {
			continue
		}
		leases++
		units += l.Granted - l.Used
		if at, ok := ledger.ReclaimableAt(&l, int64(grace)); ok && time.Unix(0, at).After(forfeitAt) {
			forfeitAt = time.Unix(0, at)
		}
	}
	return leases, units, forfeitAt
}

// TestFleetNodeOnAnEmptyDataDirectoryCreditsNothingAcknowledged: node 1
// is killed under load and comes back under its id on an empty data
// directory (its volume is lost). It must start at once, as a new
// incarnation that says what the old one's leases hold, and neither
// release nor credit them: they are forfeited after their expiry and their
// own grace, so the usage acknowledged by the lost spool and never billed
// stays paid for (in loss) — never spendable again. Before incarnations,
// the first start failed ("Replay after Append") and the second released
// the old leases, crediting acknowledged usage back to the balance. When
// the lost data directory turns up after all, starting it bills its spool
// against its own leases (late usage turns their loss into settled, a
// whole spool restores the rest) and it refuses to serve as node 1.
func TestFleetNodeOnAnEmptyDataDirectoryCreditsNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	url := pgtest.Database(t)
	const ttl, grace = 5 * time.Second, 2 * time.Second
	extra := []string{"--lease-ttl", ttl.String(), "--lease-grace", grace.String()}
	nodes := startFleet(t, url, 2, extra...)
	const funded = 1_000_000
	key := nodes[0].provision("vol", funded, 1)
	newChecker(nodes[1].listen, key).until(t, time.Now(), http.StatusOK, "", 5*time.Second)
	if t.Failed() {
		t.FailNow()
	}
	stop := make(chan struct{})
	before := loadUntil(context.Background(), stop, nodes[1].listen, key, 4, 5*time.Second)
	before.awaitAcked(t, 500)
	lostDir := nodes[1].dataDir
	nodes[1].kill9()
	lostAt := time.Now()
	close(stop)
	before.wait()
	// A commit node 1 sent just before it died still lands: its leases
	// are what they are once that has.
	awaitTransactionsBefore(t, url, lostAt)
	s := openFleetLedger(t, url)
	oldLeases, oldUnits, _ := heldBy(t, s, "node-1", grace)
	if oldLeases == 0 {
		t.Fatal("node 1 held no lease when it died")
	}

	// The volume is lost: the same id, an empty data directory.
	nodes[1] = startProc(t, t.TempDir(), fleetFlags(url, 1, extra...)...)
	logs := nodes[1].all.String()
	if !strings.Contains(logs, "new incarnation") || !strings.Contains(logs, `"incarnation":2`) ||
		!strings.Contains(logs, `"previous_units_held":`) || strings.Contains(logs, "recovered the leases this node held") {
		t.Fatalf("node 1 on an empty data directory logged:\n%s", logs)
	}
	if n, units, _ := heldBy(t, s, "node-1", grace); n != oldLeases || units != oldUnits {
		t.Fatalf("the old incarnation's leases after the new one started: %d holding %d, were %d holding %d", n, units, oldLeases, oldUnits)
	}
	stop = make(chan struct{})
	after := loadUntil(context.Background(), stop, nodes[1].listen, key, 2, 5*time.Second)
	after.awaitAcked(t, 100)
	close(stop)
	after.wait()
	if len(after.units) == 0 {
		t.Fatalf("the new incarnation admitted nothing: %v", after.denied)
	}
	// The old incarnation's leases go by their expiry and their own grace,
	// through maintenance. The live nodes stop first (they hand their own
	// leases back), and the test runs the forfeit itself, as any node's
	// maintenance may, with the clock at the old leases' expiry and grace
	// rather than waiting for it (node 0 may have got there already).
	for _, n := range nodes {
		n.stop()
	}
	held, err := s.LeasesOf(t.Context(), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range held {
		if l.State == ledger.LeaseActive && l.GrantedAt >= lostAt.UnixNano() {
			t.Fatalf("the new incarnation's clean stop left its lease active: %+v", l)
		}
	}
	if n, _, forfeitAt := heldBy(t, s, "node-1", grace); n > 0 {
		if _, err := s.Reclaim(t.Context(), forfeitAt.UnixNano()+1, int64(grace), 1000); err != nil {
			t.Fatal(err)
		}
	}
	if n, units, _ := heldBy(t, s, "node-1", grace); n != 0 {
		t.Fatalf("the old incarnation's leases were not forfeited past their expiry and grace: %d holding %d", n, units)
	}
	if found, err := s.Reconcile(t.Context()); err != nil || len(found) > 0 {
		t.Fatalf("reconciliation: %v, %v", found, err)
	}
	billed := usageByID(t, s, "vol") // fails on an event billed twice
	var ackedUnits core.CostUnits
	for _, a := range []*acked{before, after} {
		_, u := a.ackedUnits()
		ackedUnits += core.CostUnits(u)
	}
	for id, u := range after.units {
		if b, ok := billed[id]; !ok || uint64(b.Units) != u {
			t.Fatalf("request %s acknowledged by the new incarnation billed as %+v (%v)", id, b, ok)
		}
	}
	acct, err := s.Account(t.Context(), "vol")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Outstanding != 0 || acct.Balance() > funded-ackedUnits {
		t.Fatalf("%d units acknowledged of %d deposited, but the balance is %d (settled %d, loss %d): acknowledged usage was credited back",
			ackedUnits, funded, acct.Balance(), acct.Settled, acct.Loss)
	}
	incs, err := s.Incarnations(t.Context())
	if err != nil || !slices.ContainsFunc(incs, func(i ledger.Incarnation) bool { return i.Node == "node-1" && i.Number == 2 }) {
		t.Fatalf("incarnations %+v, %v", incs, err)
	}
	t.Logf("acknowledged %d units (%d before the volume was lost); settled %d, loss %d (the old incarnation held %d in %d leases), balance %d",
		ackedUnits, len(before.units), acct.Settled, acct.Loss, oldUnits, oldLeases, acct.Balance())

	// The lost data directory turns up again: started, it bills its spool
	// against its own incarnation's leases, and refuses to serve as node 1.
	code, stderr := runFailingProc(t, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", lostDir, "--shards", "1"},
		fleetFlags(url, 1, extra...)...)...)
	if code != 1 || !strings.Contains(stderr, "this data directory is incarnation 1") || !strings.Contains(stderr, "ledger's node \\\"node-1\\\" is incarnation 2") {
		t.Fatalf("the old data directory: exit %d\n%s", code, stderr)
	}
	billed = usageByID(t, s, "vol")
	for _, a := range []*acked{before, after} {
		for id, u := range a.units {
			if b, ok := billed[id]; !ok || uint64(b.Units) != u {
				t.Fatalf("acknowledged request %s (%d units) billed as %+v (%v) once the old spool was billed", id, u, b, ok)
			}
		}
	}
	if acct, err = s.Account(t.Context(), "vol"); err != nil || acct.Balance() > funded-ackedUnits || acct.Outstanding != 0 {
		t.Fatalf("after the old spool was billed: %+v, %v", acct, err)
	}
	if found, err := s.Reconcile(t.Context()); err != nil || len(found) > 0 {
		t.Fatalf("reconciliation: %v, %v", found, err)
	}
	t.Logf("the old data directory billed its spool and stopped: settled %d, loss %d, balance %d\n%s", acct.Settled, acct.Loss, acct.Balance(), lastLine(stderr))
}

// TestFleetRefusesASecondLiveHolderOfANodeID: a second process started
// under a live node's id — on an empty data directory of its own — is
// refused, and serves nothing; the node killed with SIGKILL frees its id
// at once, so its restart on its data directory is not held up.
func TestFleetRefusesASecondLiveHolderOfANodeID(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	url := pgtest.Database(t)
	live := startProc(t, t.TempDir(), fleetFlags(url, 0)...)
	code, stderr := runFailingProc(t, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", t.TempDir(), "--shards", "1"},
		fleetFlags(url, 0)...)...)
	if code != 1 || !strings.Contains(stderr, `node \"node-0\" is live`) {
		t.Fatalf("a second process as node-0: exit %d\n%s", code, stderr)
	}
	live.requireAlive(t)
	live.kill9()
	start := time.Now()
	live = startProc(t, live.dataDir, fleetFlags(url, 0)...)
	t.Logf("refused: %s; the killed node restarted in %v", lastLine(stderr), time.Since(start).Round(time.Millisecond))
	live.stop()
}

// TestFleetForfeitsADeadNodesLeasesAfterItsOwnGrace: node 1 runs with a
// long --lease-grace, node 0 with none. Node 1 dies; node 0's maintenance
// must forfeit node 1's leases after their expiry and node 1's grace,
// stored with each lease — not node 0's. A canary lease, granted by the
// test to a holder that stored no grace and expiring after node 1's,
// shows when node 0's maintenance has passed node 1's expiry with its own
// grace.
func TestFleetForfeitsADeadNodesLeasesAfterItsOwnGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	url := pgtest.Database(t)
	const ttl, ownGrace = 5 * time.Second, 5 * time.Second
	reclaimer := startProc(t, t.TempDir(), fleetFlags(url, 0, "--lease-ttl", ttl.String(), "--lease-grace", "0s")...)
	dying := startProc(t, t.TempDir(), fleetFlags(url, 1, "--lease-ttl", ttl.String(), "--lease-grace", ownGrace.String())...)
	key := reclaimer.provision("graceful", 1_000_000, 1)
	newChecker(dying.listen, key).until(t, time.Now(), http.StatusOK, "", 5*time.Second)
	if t.Failed() {
		t.FailNow()
	}
	dying.kill9()
	s := openFleetLedger(t, url)
	held, err := s.LeasesOf(t.Context(), "node-1")
	if err != nil || len(held) == 0 {
		t.Fatalf("node 1's leases: %+v, %v", held, err)
	}
	var expires time.Time
	for _, l := range held {
		if l.Grace != int64(ownGrace) {
			t.Fatalf("a lease of node 1 keeps grace %v, want its own %v: %+v", time.Duration(l.Grace), ownGrace, l)
		}
		if at := time.Unix(0, l.ExpiresAt); at.After(expires) {
			expires = at
		}
	}
	active := func(holder string) bool {
		n, _, _ := heldBy(t, s, holder, 0)
		return n > 0
	}
	// Node 0 reclaims every second, with its own grace (none) for a lease
	// that stored none: once it has forfeited the canary, its maintenance
	// has run past node 1's expiry, and with node 0's grace it would have
	// forfeited node 1's leases too. Time passes on node 0's clock.
	now := reclaimer.clockNow()
	canaryExpires := expires.Add(time.Second)
	if _, _, err := s.Acquire(t.Context(), "graceful", "canary", 1, 1, int64(canaryExpires.Sub(now)), now.UnixNano()); err != nil {
		t.Fatal(err)
	}
	reclaimer.advance(canaryExpires.Sub(now) + 100*time.Millisecond)
	await.True(t, "node 0 forfeiting the canary lease", func() bool { return !active("canary") })
	if !active("node-1") {
		t.Fatalf("node 1's leases were forfeited %v after their expiry, within node 1's grace of %v", reclaimer.clockNow().Sub(expires).Round(time.Second), ownGrace)
	}
	// On to node 1's grace.
	reclaimer.advance(ownGrace)
	await.True(t, "node 1's leases forfeited", func() bool { return !active("node-1") })
	reclaimer.stop()
	if found, err := s.Reconcile(t.Context()); err != nil || len(found) > 0 {
		t.Fatalf("reconciliation: %v, %v", found, err)
	}
}

// TestFleetLiveNodesForfeitNothingInAnOutage: two nodes under load, and an
// idle account that spent 5 units just before PostgreSQL stops for longer
// than their leases' TTL and grace. When it is back, maintenance
// forfeits the leases that expired meanwhile (the test reclaims first, as
// any node's maintenance may: the nodes' role may not log in until it has
// done so); their holders are alive with their spools,
// and releasing them restores what they did not spend: once the nodes
// have settled, nothing is lost, the idle account has its balance less 3,
// and every acknowledged request is billed once. Before, the forfeit was
// final: the idle account's whole lease stayed in loss.
func TestFleetLiveNodesForfeitNothingInAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes and stops PostgreSQL")
	}
	t.Parallel()
	cluster := pgtest.Own(t, pgtest.Options{})
	url := cluster.URL()
	// The nodes log in as a role of their own, which the test bars from
	// logging in while it reclaims (below).
	execSQL(t, url, `CREATE ROLE fleet LOGIN SUPERUSER`)
	nodesURL := withUser(t, url, "fleet")
	const ttl, grace = 5 * time.Second, time.Second
	nodes := startFleet(t, nodesURL, 2, "--lease-ttl", ttl.String(), "--lease-grace", grace.String())
	const funded = 1_000_000
	key := nodes[0].provision("steady", funded, 1)
	idleKey := nodes[0].provision("idle", funded, 1)
	// Both keys serve on every node once the idle one does (a node applies
	// changes in order); the probes are the idle account's first spend.
	for _, n := range nodes {
		newChecker(n.listen, idleKey).until(t, time.Now(), http.StatusOK, "", 5*time.Second)
	}
	if t.Failed() {
		t.FailNow()
	}
	spent := core.CostUnits(len(nodes) + 3)
	stop := make(chan struct{})
	var loads []*acked
	for _, n := range nodes {
		loads = append(loads, loadUntil(context.Background(), stop, n.listen, key, 1, outageTimeout))
	}
	for _, a := range loads {
		a.awaitAcked(t, 100)
	}
	// Three spends. The one connection may reach the node's other shard,
	// whose first lease for the account can take longer than
	// --funding-wait with PostgreSQL busy beside other tests (a CI run
	// saw it): then the check is refused 503 lease-unavailable, which
	// spends nothing, and is retried as a client would.
	idleChecker := newChecker(nodes[0].listen, idleKey)
	for range 3 {
		idleChecker.until(t, time.Now(), http.StatusOK, "", 5*time.Second)
	}
	if t.Failed() {
		t.FailNow()
	}
	// The nodes' sessions end with the stop, and their role may not log
	// in again until the test has reclaimed: when PostgreSQL is back, the
	// test's reclaim comes first, whatever the nodes' back-off between
	// failed ledger calls.
	execSQL(t, url, `ALTER ROLE fleet NOLOGIN`)
	cluster.Stop()
	// Every lease was granted or extended before the stop, so it expires
	// within ttl of it and is reclaimable grace later: the outage lasts
	// that long on the nodes' clocks, and the test reclaims at their time.
	outage := ttl + grace + 200*time.Millisecond
	for _, n := range nodes {
		n.advance(outage)
	}
	cluster.Start()
	s := openFleetLedger(t, url)
	forfeited, err := s.Reclaim(t.Context(), nodes[0].clockNow().UnixNano(), int64(grace), 1000)
	if err != nil || forfeited == 0 {
		t.Fatalf("reclaim as PostgreSQL came back: %d, %v; the outage should have left leases past expiry and grace", forfeited, err)
	}
	lost := func(id core.AccountID) core.CostUnits {
		a, err := s.Account(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Loss
	}
	t.Logf("forfeited %d leases as PostgreSQL came back: loss %d (steady), %d (idle)", forfeited, lost("steady"), lost("idle"))
	execSQL(t, url, `ALTER ROLE fleet LOGIN`)
	// The load goes on with the database back: every node admits again.
	for _, a := range loads {
		a.awaitAcked(t, a.count()+100)
	}
	close(stop)
	for _, a := range loads {
		a.wait()
	}
	// The holders release what they hold (they take their slices back
	// first) and settle their spools: the loss goes back to 0.
	await.True(t, "no loss once the nodes settled", func() bool { return lost("steady")+lost("idle") == 0 })
	unanswered := 0
	for i, a := range loads {
		for d, k := range a.denied {
			switch {
			case strings.HasPrefix(d, "503 lease-"):
			case d == "504 answer-timeout":
				unanswered += k
			default:
				t.Errorf("node %d answered %d× %s", i, k, d)
			}
		}
	}
	for _, n := range nodes {
		n.stop()
	}
	settledOnce(t, url, "steady", loads, unanswered)
	idle, err := s.Account(t.Context(), "idle")
	if err != nil || idle.Loss != 0 || idle.Settled != spent || idle.Balance() != funded-spent {
		t.Fatalf("the idle account after the outage: %+v, %v; want %d settled, nothing lost", idle, err, spent)
	}
}

// withUser is the database URL raw with its user replaced by user.
func withUser(t *testing.T, raw, user string) string {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(user)
	return u.String()
}

// execSQL runs statements, one after another, on the database at url.
// awaitTransactionsBefore waits until no daemon's transaction that began
// before at is still open at PostgreSQL: a killed node's last commit has
// landed, or its transaction was rolled back when its socket closed.
func awaitTransactionsBefore(t *testing.T, url string, at time.Time) {
	t.Helper()
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(t.Context())
	await.True(t, "the daemons' transactions begun before "+at.Format(time.RFC3339Nano)+" to end", func() bool {
		var open int
		err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'tollgated' AND datname = current_database() AND xact_start < $1`, at).Scan(&open)
		if err != nil {
			t.Fatal(err)
		}
		return open == 0
	})
}

func execSQL(t *testing.T, url string, statements ...string) {
	t.Helper()
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(t.Context())
	for _, q := range statements {
		if _, err := db.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
