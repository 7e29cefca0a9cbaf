package pgtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a cluster of one test's own, which the test may stop and start
// again (an outage of the database) without disturbing the tests that
// share the binary's cluster. It costs an initdb, about a second.
type Cluster struct {
	t testing.TB
	c *cluster
}

// ownDatabase is the database an own cluster is created with.
const ownDatabase = "tollgated"

// Own starts a cluster for t alone, with an empty database (URL), and
// removes it when t ends. A missing installation skips t, except under
// CI=true, as Database does.
func Own(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := startCluster(ctx, false)
	switch {
	case err == nil:
	case maySkip(err, os.Getenv):
		t.Skipf("pgtest: %v; %s", err, installHint)
	default:
		t.Fatalf("pgtest: %v (%s)", err, installHint)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ownDatabase); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return &Cluster{t: t, c: c}
}

// URL is the connection URL of the cluster's database; it stays valid
// across Stop and Start.
func (c *Cluster) URL() string { return c.c.url(ownDatabase) }

// Stop shuts PostgreSQL down (fast: sessions are ended, not waited for).
func (c *Cluster) Stop() {
	c.t.Helper()
	if err := c.c.halt(); err != nil {
		c.t.Fatalf("pgtest: %v", err)
	}
}

// Start starts a stopped cluster again, on its port, and waits until it
// accepts connections.
func (c *Cluster) Start() {
	c.t.Helper()
	_, postgres, err := findBinaries()
	if err != nil {
		c.t.Fatalf("pgtest: %v", err)
	}
	cred, err := runAs()
	if err != nil {
		c.t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.c.startPostmaster(ctx, postgres, cred, false); err != nil {
		c.t.Fatalf("pgtest: restarting: %v", err)
	}
}
