package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errNoBinaries reports a machine without PostgreSQL's server binaries.
var errNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found under /usr/lib/postgresql/*/bin or on PATH")

const (
	superuser  = "postgres"
	testUser   = "tollgated-test" // the system user the cluster runs as when the tests run as root
	dirPattern = "tollgated-pgtest-"
	ownerFile  = "owner.pid" // the test process a directory belongs to, for sweeping after a crash
	// startAttempts bounds retries when the free port picked is taken by
	// someone else before the postmaster binds it.
	startAttempts = 3
)

// cluster is one running postmaster and its directory.
type cluster struct {
	dir    string // removed by stop
	port   int
	proc   *os.Process
	exited chan struct{} // closed when the postmaster has exited
	admin  *pgxpool.Pool // to the maintenance database, for CREATE/DROP DATABASE
}

// startCluster initializes a cluster in a new temporary directory and
// starts it.
func startCluster(ctx context.Context, durable bool) (*cluster, error) {
	initdb, postgres, err := findBinaries()
	if err != nil {
		return nil, err
	}
	sweepStale()
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	if err := c.initdb(ctx, initdb, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		err = c.startPostmaster(ctx, postgres, cred, durable)
		if err == nil {
			return c, nil
		}
		if attempt == startAttempts || ctx.Err() != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// findBinaries returns initdb and postgres of the newest installed major
// version, or of the initdb on PATH (resolving Debian's symlinks).
func findBinaries() (initdb, postgres string, err error) {
	candidates, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(candidates, func(a, b string) int { return majorOf(b) - majorOf(a) })
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, real)
		}
	}
	for _, c := range candidates {
		pg := filepath.Join(filepath.Dir(c), "postgres")
		if isExecutable(c) && isExecutable(pg) {
			return c, pg, nil
		}
	}
	return "", "", errNoBinaries
}

// majorOf reads the major version from /usr/lib/postgresql/<major>/bin/initdb.
func majorOf(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// runAs returns the credential the cluster's processes run under: nil when
// the tests do not run as root; otherwise the testUser system account
// (created if missing), or nobody.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(testUser)
	if err != nil {
		// Another test binary may be creating it at the same moment: look
		// again whatever useradd said.
		exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", testUser).Run()
		if u, err = user.Lookup(testUser); err != nil {
			if u, err = user.Lookup("nobody"); err != nil {
				return nil, fmt.Errorf("no unprivileged user to run PostgreSQL as (neither %s nor nobody): %w", testUser, err)
			}
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user %s: %w", u.Username, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// initdb creates the cluster's data directory, its socket directory and
// the owner file, and gives the directory to the cluster's user.
func (c *cluster) initdb(ctx context.Context, initdb string, cred *syscall.Credential) error {
	if err := os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(c.dir, "sock"), 0o700); err != nil {
		return err
	}
	if cred != nil {
		for _, p := range []string{c.dir, filepath.Join(c.dir, "sock")} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	cmd := exec.CommandContext(ctx, initdb, "--pgdata", filepath.Join(c.dir, "data"), "--username", superuser,
		"--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-sync")
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// startPostmaster starts postgres on a free loopback port and waits until
// it accepts connections.
func (c *cluster) startPostmaster(ctx context.Context, postgres string, cred *syscall.Credential, durable bool) error {
	port := c.port // a restarted cluster keeps its port: its clients' URLs name it
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return err
		}
	}
	logPath := filepath.Join(c.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	sync := "off" // thrown away after the tests: durability buys nothing
	if durable {
		sync = "on"
	}
	cmd := exec.Command(postgres, "-D", filepath.Join(c.dir, "data"), "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+filepath.Join(c.dir, "sock"),
		"-c", "fsync="+sync, "-c", "synchronous_commit="+sync, "-c", "full_page_writes="+sync,
		// Shared memory in the data directory, so nothing outlives its removal.
		"-c", "dynamic_shared_memory_type=mmap",
		"-c", "max_connections=300", "-c", "shared_buffers=32MB",
		"-c", "log_min_messages=warning", "-c", "logging_collector=off")
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// SIGKILL when the test binary dies, however it dies. The signal is
	// tied to the thread that forked the child, so start it from a thread
	// that lives exactly as long as the postmaster.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after the postmaster
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	picked := c.port == 0
	c.port, c.proc, c.exited = port, cmd.Process, exited
	if err := c.waitReady(ctx); err != nil {
		c.kill()
		if picked {
			c.port = 0 // taken by someone else, perhaps: the next attempt picks another
		}
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("postgres on port %d: %w\n%s", port, err, bytes.TrimSpace(log))
	}
	return nil
}

// waitReady polls until the postmaster accepts a connection, exits, or ctx
// ends.
func (c *cluster) waitReady(ctx context.Context) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(attempt, c.url("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-c.exited:
			return errors.New("exited during start-up")
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop shuts the postmaster down (fast shutdown: sessions are ended, not
// waited for), and removes the directory.
func (c *cluster) stop() error {
	if c.admin != nil {
		c.admin.Close()
	}
	return errors.Join(c.halt(), os.RemoveAll(c.dir))
}

// halt shuts the postmaster down (fast shutdown) and keeps the directory:
// the cluster can start again.
func (c *cluster) halt() error {
	if c.proc == nil {
		return nil
	}
	defer func() { c.proc = nil }()
	c.proc.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
		return nil
	case <-time.After(10 * time.Second):
		c.kill()
		return errors.New("postgres did not stop within 10 s of SIGINT; killed")
	}
}

// kill ends the postmaster and its backends at once and waits for it.
func (c *cluster) kill() {
	syscall.Kill(-c.proc.Pid, syscall.SIGKILL) // its process group: backends too
	<-c.exited
}

// freePort asks the kernel for a loopback port nobody uses now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// sweepStale removes the directories of earlier runs whose test process is
// gone (killed before it could clean up). A directory whose owner is alive,
// or unknown, is left alone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		os.RemoveAll(d)
	}
}
