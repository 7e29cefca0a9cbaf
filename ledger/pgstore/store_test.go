package pgstore

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/internal/ledgertest"
	"github.com/tollgated/tollgated/internal/pgtest"
	"github.com/tollgated/tollgated/ledger"
)

// TestMain runs the tests against a throwaway PostgreSQL whose template
// database is migrated once. Benchmarks get a durable one (fsync and
// synchronous commit on, as in production), so that they compare with
// boltstore's fsync'd commits.
//
// The conformance suite's random sequences run 30 cases here (10 with
// -short) rather than rapid's 100: each step is a few database round
// trips, and the same rules get 100 cases on boltstore and 1,000 in
// package ledger. -rapid.checks on the command line wins, for a deeper run:
//
//	go test ./ledger/pgstore -run RandomSequences -rapid.checks=1000
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		checks := "30"
		if testing.Short() {
			checks = "10"
		}
		flag.Set("rapid.checks", checks)
	}
	benchmarking := flag.Lookup("test.bench").Value.String() != ""
	os.Exit(pgtest.Main(m, pgtest.Options{Prepare: Migrate, Durable: benchmarking}))
}

// openFresh opens a store on a fresh database of its own.
func openFresh(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	url := pgtest.Database(t)
	s, err := Open(t.Context(), url, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, url
}

// TestConformance runs the ledger's conformance suite. The suite names a
// store by a directory, and reopens the same directory to restart it. Each
// test gets a database of its own, and each directory a schema in it (the
// random sequences open a hundred stores: a schema is made five times
// faster than a database).
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	urls := map[string]string{}          // directory → the URL of its schema
	databases := map[*testing.T]string{} // test → its database
	ledgertest.Run(t, func(t *testing.T, dir string) ledger.Store {
		t.Helper()
		mu.Lock()
		url, ok := urls[dir]
		if !ok {
			db, ok := databases[t]
			if !ok {
				db = pgtest.Database(t)
				databases[t] = db
			}
			url = withSchema(t, db, fmt.Sprintf("s%d", len(urls)))
			urls[dir] = url
		}
		mu.Unlock()
		s, err := Open(t.Context(), url, Options{})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return s
	})
}

// withSchema creates schema in the database at url and returns a URL whose
// connections use it: the store's tables are then created, and found, in
// it.
func withSchema(t testing.TB, url, schema string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	return url + "&search_path=" + schema
}
