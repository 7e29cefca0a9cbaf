// Package pgtest runs a throwaway PostgreSQL cluster for a test binary and
// hands each test a fresh database of its own.
//
// The cluster is started on first use (a test binary whose tests never ask
// for a database starts nothing) from the Debian `postgresql` package's
// binaries (/usr/lib/postgresql/*/bin), in a temporary directory, listening
// on 127.0.0.1 only, on a free port, with a Unix socket inside that
// directory, and with fsync off (unless Options.Durable): it is thrown
// away, so durability buys nothing. Every test database is a copy of one template (CREATE DATABASE
// … TEMPLATE), which Options.Prepare fills once, so a test starts from a
// migrated schema in milliseconds and sees no other test's rows.
//
// initdb refuses to run as root, and CI runs as root: then the cluster runs
// as the system user tollgated-test (created if missing; nobody if it
// cannot be), which owns the temporary directory. The postmaster is started
// with a parent-death signal, so a test binary that dies (a panic, a
// timeout, kill -9) takes its cluster with it; the directory it leaves
// behind is removed by the next run.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{Prepare: migrate})) }
//
// When the binaries are missing, tests that ask for a database skip with
// the command that installs them, except under CI=true, where they fail:
// CI must run them.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure the cluster of a test binary.
type Options struct {
	// Prepare runs once against the template database every test database
	// is copied from, for example to apply migrations. It must close every
	// connection it opened before it returns: PostgreSQL copies only a
	// template nobody is connected to.
	Prepare func(ctx context.Context, url string) error
	// Durable keeps PostgreSQL's fsync and synchronous commit on, as in
	// production: for benchmarks, whose numbers must include the cost of
	// durability. Tests leave it off.
	Durable bool
}

// installHint is how to get the binaries pgtest needs.
const installHint = "install PostgreSQL's server binaries: apt-get install -y --no-install-recommends postgresql (or bash scripts/postgres.sh)"

// templateName is the database every test database is copied from.
const templateName = "pgtest_template"

// startTimeout bounds initdb plus the first successful connection.
const startTimeout = 60 * time.Second

var (
	mu       sync.Mutex
	options  Options
	inMain   bool
	started  bool
	running  *cluster
	startErr error
	dbSeq    atomic.Uint64
)

// Main runs the tests of m, then stops the cluster (if a test started one)
// and removes its directory. It returns the exit code for os.Exit.
func Main(m *testing.M, opts Options) int {
	mu.Lock()
	options, inMain = opts, true
	mu.Unlock()
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if running != nil {
		if err := running.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		running = nil
	}
	return code
}

// Database creates a fresh database for t, copied from the template, and
// returns its connection URL. The database is dropped when t ends.
func Database(t testing.TB) string {
	t.Helper()
	c := get(t)
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+templateName); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return c.url(name)
}

// get returns the running cluster, starting it on first use. A missing
// installation skips t, except under CI=true; any other failure fails it.
func get(t testing.TB) *cluster {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !inMain {
		t.Fatal("pgtest: call pgtest.Main from the package's TestMain, so the cluster is stopped and removed after the tests")
	}
	if !started {
		started = true
		running, startErr = start(options)
	}
	switch {
	case startErr == nil:
	case maySkip(startErr, os.Getenv):
		t.Skipf("pgtest: %v; %s", startErr, installHint)
	default:
		t.Fatalf("pgtest: %v (%s)", startErr, installHint)
	}
	return running
}

// maySkip reports whether a cluster that failed to start with err lets its
// tests skip: only when PostgreSQL is not installed, and never under
// CI=true, where the tests must run.
func maySkip(err error, getenv func(string) string) bool {
	return errors.Is(err, errNoBinaries) && getenv("CI") != "true"
}

// start starts a cluster and prepares its template.
func start(opts Options) (*cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := startCluster(ctx, opts.Durable)
	if err != nil {
		return nil, err
	}
	if err := c.prepareTemplate(ctx, opts.Prepare); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// prepareTemplate creates the template database and runs prepare on it.
func (c *cluster) prepareTemplate(ctx context.Context, prepare func(context.Context, string) error) error {
	admin, err := pgxpool.New(ctx, c.url("postgres"))
	if err != nil {
		return err
	}
	c.admin = admin
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+templateName); err != nil {
		return fmt.Errorf("creating the template database: %w", err)
	}
	if prepare != nil {
		if err := prepare(ctx, c.url(templateName)); err != nil {
			return fmt.Errorf("preparing the template database: %w", err)
		}
	}
	// No test may connect to the template by mistake: a connection to it
	// would make every CREATE DATABASE … TEMPLATE fail.
	_, err = admin.Exec(ctx, "ALTER DATABASE "+templateName+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
	return err
}

// url is the connection URL of database name, over TCP on loopback.
func (c *cluster) url(name string) string {
	u := url.URL{Scheme: "postgres", User: url.User(superuser), Host: fmt.Sprintf("127.0.0.1:%d", c.port), Path: "/" + name,
		RawQuery: "sslmode=disable"}
	return u.String()
}
