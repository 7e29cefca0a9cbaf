package pgtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a cluster of one test's own, which the test may stop and start
// again (an outage of the database) without disturbing the tests that
// share the binary's cluster. It costs an initdb, about a second.
type Cluster struct {
	t       testing.TB
	c       *cluster
	durable bool
}

// ownDatabase is the database an own cluster is created with.
const ownDatabase = "tollgated"

// Own starts a cluster for t alone, with an empty database (URL), and
// removes it when t ends; of opts only Durable counts. A missing
// installation skips t, except under CI=true, as Database does.
func Own(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := startCluster(ctx, opts.Durable)
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
	return &Cluster{t: t, c: c, durable: opts.Durable}
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
	if err := c.c.startPostmaster(ctx, postgres, cred, c.durable); err != nil {
		c.t.Fatalf("pgtest: restarting: %v", err)
	}
}

// clockTick is Linux's USER_HZ, the unit of /proc's CPU times.
const clockTick = 10 * time.Millisecond

// CPU is the CPU time (user and system) PostgreSQL has used so far: the
// postmaster's, its ended children's (which it reaped) and its live
// children's (backends, the checkpointer, the WAL writer…).
func (c *Cluster) CPU() time.Duration {
	c.t.Helper()
	pm := c.c.proc.Pid
	f, err := procStat(pm)
	if err != nil {
		c.t.Fatalf("pgtest: %v", err)
	}
	ticks := f[11] + f[12] + f[13] + f[14] // utime, stime, cutime, cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		c.t.Fatalf("pgtest: %v", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		if f, err := procStat(pid); err == nil && f[1] == int64(pm) { // its parent is the postmaster
			ticks += f[11] + f[12]
		}
	}
	return time.Duration(ticks) * clockTick
}

// procStat reads /proc/pid/stat's fields after the command's name, as
// numbers (0 where not one): [0] state, [1] ppid, … [11] utime, [12] stime,
// [13] cutime, [14] cstime.
func procStat(pid int) ([]int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	out := make([]int64, len(fields))
	for j, s := range fields {
		out[j], _ = strconv.ParseInt(s, 10, 64)
	}
	return out, nil
}
