package pgstore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/pgtest"
	"github.com/tollgated/tollgated/ledger"
)

// emptyDatabase returns the URL of a fresh database without the store's
// schema: the template's tables moved out of the way into a schema nobody
// reads.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	return withSchema(t, pgtest.Database(t), "empty")
}

func TestMigrationsAreNumberedFromOne(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || SchemaVersion() != len(ms) {
		t.Fatalf("%d migrations, schema version %d", len(ms), SchemaVersion())
	}
	for i, m := range ms {
		if m.version != i+1 || m.name == "" || m.sql == "" {
			t.Fatalf("migration %d: %+v", i, m)
		}
	}
}

// TestNodesMigrateOnceAtOnce: nodes opening a new database at the same
// moment apply each migration once, under the lock, and all start.
func TestNodesMigrateOnceAtOnce(t *testing.T) {
	url := emptyDatabase(t)
	const nodes = 4
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for range nodes {
		wg.Go(func() {
			s, err := Open(t.Context(), url, Options{})
			if err == nil {
				err = s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("open: %v", err)
		}
	}
	conn := connect(t, url)
	var n, max int
	if err := conn.QueryRow(t.Context(), "SELECT count(*), max(version) FROM schema_migrations").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != SchemaVersion() || max != SchemaVersion() {
		t.Fatalf("schema_migrations has %d rows up to %d; want %d", n, max, SchemaVersion())
	}
}

// TestRefusesANewerSchema: a database migrated by a newer build is refused
// with ErrSchemaTooNew, and this build writes nothing to it.
func TestRefusesANewerSchema(t *testing.T) {
	s, url := openFresh(t, Options{})
	s.Close()
	conn := connect(t, url)
	newer := SchemaVersion() + 1
	if _, err := conn.Exec(t.Context(), "INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future')", newer); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), url, Options{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("open of a newer schema: %v", err)
	}
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n != newer {
		t.Fatalf("schema_migrations has %d rows (%v), want %d", n, err, newer)
	}
	t.Log(err)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestSchema1IsUpgraded: a database as the first schema left it — debts
// beside balances, a lease without a holder, keys without names or
// expiries, one admin token digest — is brought to the current schema on
// Open: debts are repaid from the balances (top-ups first), the digest is
// the bootstrap admin token, and the ledger is sound.
func TestSchema1IsUpgraded(t *testing.T) {
	url := emptyDatabase(t)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	err = migrateTo(t.Context(), pool, ms[:1])
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	for _, q := range []string{
		// id, parent, money: deposited, overage, allowance left, top-ups left, settled
		`INSERT INTO accounts (id, parent, capacity, unmetered, scope, status, policy, policy_generation,
			budget_allowance, budget_period, deposited, overage, allowance_left, top_up_left, outstanding, settled,
			loss, expired, period_start, period_end, next_token) VALUES
			('org', NULL, 0, false, 3, 0, NULL, 1, 100, 1, 130, 30, 50, 10, 0, 100, 0, 0, 0, 86400000000000, 1),
			('deep', NULL, 0, false, 3, 0, NULL, 1, 0, 0, 40, 100, 0, 40, 0, 100, 0, 0, 0, 0, 2),
			('broke', NULL, 0, false, 3, 0, NULL, 1, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 0, 1)`,
		`INSERT INTO usage_totals (account, source, events, units) VALUES ('org', 3, 1, 100), ('deep', 3, 1, 100), ('broke', 2, 1, 5)`,
		`INSERT INTO leases (id, account, token, granted, used, credited, state, granted_at, expires_at,
			funders, funded_allowance, funded_top_up, funded_period_start) VALUES
			(1, 'deep', 1, 10, 0, 10, 2, 0, 60000000000, '{deep}', '{0}', '{10}', '{0}')`,
		`INSERT INTO keys (id, account, digest, created_at, revoked) VALUES ('k1', 'deep', '\x` + strings.Repeat("01", 32) + `', 7, false)`,
		`INSERT INTO settings (name, value) VALUES ('admin_token_digest', '\x` + strings.Repeat("0a", 32) + `')`,
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
	type debt struct{ overage, allowance, topUp, repaid core.CostUnits }
	for id, want := range map[core.AccountID]debt{
		"org":   {0, 30, 0, 30}, // 10 from top-ups, then 20 from the allowance
		"deep":  {60, 0, 0, 40},
		"broke": {5, 0, 0, 0},
	} {
		a, err := s.Account(t.Context(), id)
		if got := (debt{a.Overage, a.AllowanceLeft, a.TopUpLeft, a.Repaid}); err != nil || got != want {
			t.Fatalf("%s after the upgrade: %+v (%v), want %+v", id, got, err, want)
		}
	}
	leases, err := s.Leases(t.Context(), false)
	if err != nil || len(leases) != 1 || leases[0].Holder != "" || leases[0].Credited != 10 {
		t.Fatalf("leases after the upgrade: %+v, %v", leases, err)
	}
	keys, err := s.Keys(t.Context(), "")
	if want := (ledger.Key{ID: "k1", Account: "deep", Digest: [32]byte(bytes.Repeat([]byte{1}, 32)), CreatedAt: 7}); err != nil ||
		len(keys) != 1 || keys[0] != want {
		t.Fatalf("keys after the upgrade: %+v, %v", keys, err)
	}
	boot := ledger.AdminToken{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: [32]byte(bytes.Repeat([]byte{10}, 32)),
		Role: ledger.RoleAdmin}
	if tokens, err := s.AdminTokens(t.Context()); err != nil || len(tokens) != 1 || tokens[0] != boot {
		t.Fatalf("admin tokens after the upgrade: %+v, %v", tokens, err)
	}
	if _, ok, err := s.SecretFingerprint(t.Context()); ok || err != nil {
		t.Fatalf("the admin digest reads as a secret fingerprint: %v, %v", ok, err)
	}
	var collation string
	if err := conn.QueryRow(t.Context(), `SELECT collation_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'accounts' AND column_name = 'id'`).Scan(&collation); err != nil || collation != "C" {
		t.Fatalf("account ids are collated %q (%v), want C", collation, err)
	}
	sound(t, s)
}

// TestSchema4AdminTokensBecomeAdmins: admin tokens a schema-4 database
// holds (no role: each could do everything) are admins after the upgrade,
// the bootstrap token included, and a token added afterwards keeps its
// role; the database refuses a role that is none of ledger.AdminRoles.
func TestSchema4AdminTokensBecomeAdmins(t *testing.T) {
	url := emptyDatabase(t)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	err = migrateTo(t.Context(), pool, ms[:4])
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	if _, err := conn.Exec(t.Context(), `INSERT INTO admin_tokens (id, name, digest, created_at, revoked) VALUES
		('bootstrap', 'bootstrap', '\x`+strings.Repeat("01", 32)+`', 0, false),
		('atk_ops', 'ops', '\x`+strings.Repeat("02", 32)+`', 7, true)`); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	viewer := ledger.AdminToken{ID: "atk_view", Name: "grafana", Digest: [32]byte{3}, CreatedAt: 8, Role: ledger.RoleViewer}
	if err := s.AddAdminToken(t.Context(), viewer); err != nil {
		t.Fatal(err)
	}
	want := []ledger.AdminToken{
		{ID: "atk_ops", Name: "ops", Digest: [32]byte(bytes.Repeat([]byte{2}, 32)), CreatedAt: 7, Revoked: true, Role: ledger.RoleAdmin},
		viewer,
		{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: [32]byte(bytes.Repeat([]byte{1}, 32)), Role: ledger.RoleAdmin},
	}
	if got, err := s.AdminTokens(t.Context()); err != nil || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("admin tokens after the upgrade: %+v, %v\nwant %+v", got, err, want)
	}
	if _, err := conn.Exec(t.Context(), `UPDATE admin_tokens SET role = 'root' WHERE id = 'atk_view'`); err == nil {
		t.Fatal("the database took the role root")
	}
	sound(t, s)
}
