package pgstore

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
)

// TestSchema3IsUpgradedWithIncarnations: a database as schema 3 left it
// — leases naming their holders, export marks — is brought to the current
// schema with every such node registered as incarnation 1 of its id,
// without a grace, and its leases keeping none, and the ledger is sound.
func TestSchema3IsUpgradedWithIncarnations(t *testing.T) {
	url := emptyDatabase(t)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	err = migrateTo(t.Context(), pool, ms[:3])
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	for _, q := range []string{
		`INSERT INTO accounts (id, parent, capacity, unmetered, scope, status, policy, policy_generation,
			budget_allowance, budget_period, deposited, overage, allowance_left, top_up_left, outstanding, settled,
			loss, expired, repaid, period_start, period_end, next_token) VALUES
			('org', NULL, 0, false, 3, 0, NULL, 1, 0, 0, 100, 0, 0, 70, 20, 0, 10, 0, 0, 0, 0, 4)`,
		`INSERT INTO leases (id, account, holder, token, granted, used, credited, state, granted_at, expires_at,
			funders, funded_allowance, funded_top_up, funded_period_start) VALUES
			(1, 'org', 'node-a', 1, 10, 0, 0, 1, 0, 60000000000, '{org}', '{0}', '{10}', '{0}'),
			(2, 'org', 'node-b', 2, 10, 0, 0, 1, 0, 60000000000, '{org}', '{0}', '{10}', '{0}'),
			(3, 'org', 'node-b', 3, 10, 0, 0, 3, 0, 60000000000, '{org}', '{0}', '{10}', '{0}')`,
		`INSERT INTO export_marks (node, mark, settled_at) VALUES ('node-c', 7, 0)`,
	} {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err := Open(t.Context(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	incs, err := s.Incarnations(t.Context())
	want := []ledger.Incarnation{{Node: "node-a", Number: 1, Grace: ledger.NoGrace}, {Node: "node-b", Number: 1, Grace: ledger.NoGrace},
		{Node: "node-c", Number: 1, Grace: ledger.NoGrace}}
	if err != nil || !slices.Equal(incs, want) {
		t.Fatalf("incarnations %+v, %v; want %+v", incs, err, want)
	}
	held, err := s.LeasesOf(t.Context(), "node-b")
	if err != nil || len(held) != 2 || held[0].ID != 2 || held[1].State != ledger.LeaseReclaimed || held[0].Grace != ledger.NoGrace {
		t.Fatalf("leases of node-b: %+v, %v", held, err)
	}
	if i, err := s.Incarnate(t.Context(), "node-c", 0, 0, 1); err != nil || i.Number != 2 {
		t.Fatalf("node-c on an empty data directory: %+v, %v", i, err)
	}
	sound(t, s)
}

// TestClaimRefusesASecondLiveHolder: one connection at a time holds a node
// id's claim; it is free again at once when its holder lets go or its
// connection ends (a killed process), and a held claim survives its
// connection being cut. A holder whose claim another connection took while
// it was cut off is told, once.
func TestClaimRefusesASecondLiveHolder(t *testing.T) {
	s, url := openFresh(t, Options{})
	other, err := Open(t.Context(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var lost atomic.Int32
	first, err := s.Claim(t.Context(), "node-a", func(error) { lost.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Claim(t.Context(), "node-a", nil); !errors.Is(err, ErrNodeLive) {
		t.Fatalf("a second claim on a live node id: %v", err)
	}
	b, err := other.Claim(t.Context(), "node-b", nil)
	if err != nil {
		t.Fatalf("another node id: %v", err)
	}
	b.Release()
	conn := connect(t, url)
	cut := func() {
		t.Helper()
		if _, err := conn.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = $1 AND datname = current_database()`, claimApp); err != nil {
			t.Fatal(err)
		}
	}
	// Cut off, the holder takes its claim again on a new connection.
	held := func() (pid int) {
		t.Helper()
		err := conn.QueryRow(t.Context(), `SELECT coalesce(max(l.pid), 0) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1 AND a.datname = current_database()`, claimApp).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	before := held()
	if before == 0 {
		t.Fatal("no connection holds the claim")
	}
	cut()
	await.True(t, "the claim taken again after its connection was cut", func() bool {
		pid := held()
		return pid != 0 && pid != before
	})
	if _, err := other.Claim(t.Context(), "node-a", nil); !errors.Is(err, ErrNodeLive) {
		t.Fatalf("a second claim after the holder took it back: %v", err)
	}
	if lost.Load() != 0 {
		t.Fatal("the holder was told it lost a claim it took back")
	}
	// Cut off again, and another connection takes it first.
	cut()
	var second *Claim
	for deadline := time.Now().Add(claimPing / 2); second == nil; {
		if second, err = other.Claim(t.Context(), "node-a", nil); err != nil && time.Now().After(deadline) {
			t.Fatalf("the claim of a cut-off holder: %v", err)
		}
	}
	defer second.Release()
	await.True(t, "the holder told another connection took its claim", func() bool { return lost.Load() != 0 })
	first.Release()
	if lost.Load() != 1 {
		t.Fatalf("told %d times", lost.Load())
	}
}
