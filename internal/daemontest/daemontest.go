// Package daemontest builds the real tollgated binary and runs it for
// tests of other programs (tollgatectl, the README's commands): on
// loopback ports it picks itself, in a data directory of the test's, until
// the test ends.
package daemontest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// AdminToken is the admin token the daemons are started with.
const AdminToken = "tga_daemontest-admin-token-0123456789"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Build compiles the module's commands (tollgated, tollgatectl) once per
// test binary and returns the directory holding them.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tollgated-bin-")
		if buildErr != nil {
			return
		}
		for _, cmd := range []string{"tollgated", "tollgatectl"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, cmd),
				"github.com/tollgated/tollgated/cmd/"+cmd).CombinedOutput()
			if err != nil {
				buildErr = &buildError{cmd, string(out), err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

type buildError struct {
	cmd, out string
	err      error
}

func (e *buildError) Error() string { return "building " + e.cmd + ": " + e.err.Error() + "\n" + e.out }

// Daemon is a running tollgated.
type Daemon struct {
	Listen, Admin string // host:port of the data plane and the admin API
	DataDir       string
	Token         string
	t             testing.TB
	cmd           *exec.Cmd
	exited        chan error
	mu            sync.Mutex
	logs          strings.Builder
}

// Start runs tollgated on dataDir (a new temporary one if empty) with
// extra flags, and waits until it is ready.
func Start(t testing.TB, dataDir string, extra ...string) *Daemon {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	bin := filepath.Join(Build(t), "tollgated")
	args := append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", dataDir,
		"--shards", "2", "--shutdown-grace", "2s"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TOLLGATED_ADMIN_TOKEN="+AdminToken)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{DataDir: dataDir, Token: AdminToken, t: t, cmd: cmd, exited: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.logs.WriteString(line + "\n")
			d.mu.Unlock()
			if strings.Contains(line, "tollgated ready") {
				select {
				case ready <- line:
				default:
				}
			}
		}
		d.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case line := <-ready:
		var m struct{ Listen, Admin string }
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Listen == "" || m.Admin == "" {
			t.Fatalf("ready line %q: %v", line, err)
		}
		d.Listen, d.Admin = m.Listen, m.Admin
	case err := <-d.exited:
		t.Fatalf("tollgated exited before it was ready (%v):\n%s", err, d.Logs())
	case <-time.After(20 * time.Second):
		t.Fatalf("tollgated not ready within 20 s:\n%s", d.Logs())
	}
	return d
}

// AdminURL is the admin API's base URL.
func (d *Daemon) AdminURL() string { return "http://" + d.Admin }

// Logs is everything the daemon logged so far.
func (d *Daemon) Logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

// Stop sends SIGTERM and waits for a clean exit.
func (d *Daemon) Stop() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		d.t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			d.t.Fatalf("exit after SIGTERM: %v\n%s", err, d.Logs())
		}
	case <-time.After(30 * time.Second):
		d.t.Fatal("no exit within 30 s of SIGTERM")
	}
}
