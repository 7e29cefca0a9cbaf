package pgstore

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/internal/pgtest"
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
