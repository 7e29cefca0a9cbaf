package pgtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tollgated/tollgated/internal/await"
)

func TestMain(m *testing.M) {
	os.Exit(Main(m, Options{Prepare: func(ctx context.Context, url string) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE notes (body text NOT NULL)")
		return err
	}}))
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

// TestDatabasesAreCopiesOfTheTemplateAndIsolated: each database has what
// Prepare made, and nothing another test wrote.
func TestDatabasesAreCopiesOfTheTemplateAndIsolated(t *testing.T) {
	a, b := connect(t, Database(t)), connect(t, Database(t))
	if _, err := a.Exec(t.Context(), "INSERT INTO notes VALUES ('only in a')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(t.Context(), "SELECT count(*) FROM notes").Scan(&n); err != nil || n != 0 {
		t.Fatalf("b sees %d notes, %v", n, err)
	}
	if err := a.QueryRow(t.Context(), "SELECT count(*) FROM notes").Scan(&n); err != nil || n != 1 {
		t.Fatalf("a sees %d notes, %v", n, err)
	}
}

// TestClusterIsLoopbackOnlyAndUnprivileged: the server listens on
// 127.0.0.1 only, with fsync off, and never runs as root.
func TestClusterIsLoopbackOnlyAndUnprivileged(t *testing.T) {
	conn := connect(t, Database(t))
	var listen, fsync, dataDir string
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('listen_addresses'), current_setting('fsync'), current_setting('data_directory')").
		Scan(&listen, &fsync, &dataDir); err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1" || fsync != "off" {
		t.Fatalf("listen_addresses %q, fsync %q", listen, fsync)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid == 0 {
		t.Fatalf("data directory %s is owned by root", dataDir)
	}
	if filepath.Dir(filepath.Dir(dataDir)) != filepath.Clean(os.TempDir()) {
		t.Fatalf("data directory %s is not in a temporary directory", dataDir)
	}
}

func TestOnlyAMissingInstallSkipsAndNeverUnderCI(t *testing.T) {
	env := func(ci string) func(string) string {
		return func(k string) string {
			if k == "CI" {
				return ci
			}
			return ""
		}
	}
	for _, c := range []struct {
		err  error
		ci   string
		skip bool
	}{
		{errNoBinaries, "", true},
		{errNoBinaries, "true", false},
		{fmt.Errorf("start: %w", errNoBinaries), "", true},
		{errors.New("initdb failed"), "", false},
		{errors.New("initdb failed"), "true", false},
	} {
		if got := maySkip(c.err, env(c.ci)); got != c.skip {
			t.Errorf("maySkip(%v) with CI=%q = %v", c.err, c.ci, got)
		}
	}
}

const holderEnv = "PGTEST_HOLD_CLUSTER"

// TestHoldCluster is the child of TestClusterDiesWithItsTestBinary: it
// starts a cluster, reports the postmaster and its directory, and waits
// to be killed. It waits on its standard input, which the parent holds
// open: should the parent go first, the child ends too, instead of
// holding a cluster for a fixed time.
func TestHoldCluster(t *testing.T) {
	if os.Getenv(holderEnv) == "" {
		t.Skip("run by TestClusterDiesWithItsTestBinary")
	}
	c := get(t)
	fmt.Printf("cluster %d %s\n", c.proc.Pid, c.dir)
	io.Copy(io.Discard, os.Stdin)
}

// TestClusterDiesWithItsTestBinary: kill -9 of the test binary takes its
// postmaster down with it, and the next run removes the directory left
// behind.
func TestClusterDiesWithItsTestBinary(t *testing.T) {
	get(t) // skips here, not in the child, when PostgreSQL is missing
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldCluster$", "-test.v")
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	hold, err := cmd.StdinPipe() // open until the child is killed
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pid int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "cluster %d %s", &pid, &dir); err == nil {
			break
		}
	}
	if pid == 0 {
		t.Fatal("the child reported no cluster")
	}
	if !alive(pid) {
		t.Fatalf("postmaster %d is not running", pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	await.True(t, fmt.Sprintf("postmaster %d to die with its test binary", pid), func() bool { return !alive(pid) })
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed binary's directory: %v", err)
	}
	sweepStale()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the sweep left %s: %v", dir, err)
	}
}

// alive reports whether pid is a running process (a zombie is not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// TestOwnClusterStopsAndStartsAgain: an own cluster refuses connections
// while stopped, and comes back on the same URL with its data.
func TestOwnClusterStopsAndStartsAgain(t *testing.T) {
	c := Own(t, Options{})
	conn := connect(t, c.URL())
	cpu := c.CPU()
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "SELECT count(*) FROM generate_series(1, 3000000)"); err != nil {
		t.Fatal(err)
	}
	if used := c.CPU() - cpu; used <= 0 {
		t.Fatalf("a query of three million rows used %v of PostgreSQL's CPU", used)
	}
	c.Stop()
	if _, err := conn.Exec(t.Context(), "SELECT 1"); err == nil {
		t.Fatal("a session survived the stop")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if down, err := pgx.Connect(ctx, c.URL()); err == nil {
		down.Close(ctx)
		t.Fatal("a stopped cluster accepted a connection")
	}
	c.Start()
	var n int
	if err := connect(t, c.URL()).QueryRow(t.Context(), "SELECT n FROM kept").Scan(&n); err != nil || n != 7 {
		t.Fatalf("after the restart: %d, %v", n, err)
	}
}
