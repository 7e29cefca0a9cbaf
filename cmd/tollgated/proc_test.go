//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/ledger/boltstore"
)

// Every test that starts a real process calls t.Parallel after its -short
// skip: such a test spends most of its wall time waiting on its daemons'
// cadences, so several overlap well (make test runs four at a time). Each
// owns its data directories, ports and PostgreSQL database; one that must
// stop PostgreSQL owns its cluster (pgtest.Own), and a query over the
// shared cluster's activity names its own database.

// testAdminToken is the admin token the test daemons are started with.
const testAdminToken = "tga_test-admin-token-0123456789abcdef"

// proc is a real tollgated process (the test binary re-executed as the
// daemon, see TestMain), on loopback ports it chose itself.
type proc struct {
	t           testing.TB
	cmd         *exec.Cmd
	listen, adm string
	lines       chan string
	all         syncBuffer // every line, whether or not anyone waited for it
	exited      chan error
	dataDir     string
	clockOffset time.Duration // how far advance moved the daemon's clock
}

// startProc starts tollgated on dataDir with extra flags and waits until
// it is ready.
func startProc(t testing.TB, dataDir string, extra ...string) *proc {
	t.Helper()
	return startProcEnv(t, dataDir, nil, extra...)
}

// startProcEnv is startProc with extra environment variables.
func startProcEnv(t testing.TB, dataDir string, env []string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", dataDir,
		"--shards", "2", "--shutdown-grace", "2s"}, extra...)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TOLLGATED_TEST_AS_DAEMON=1", "TOLLGATED_TEST_ARGS="+strings.Join(args, " "),
		"TOLLGATED_ADMIN_TOKEN="+testAdminToken)
	if bin := os.Getenv("TOLLGATED_TEST_BINARY"); bin != "" {
		// Another build, to show a test fails there (see controlplane_test.go).
		cmd = exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TOLLGATED_ADMIN_TOKEN="+testAdminToken)
	}
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, lines: make(chan string, 1024), exited: make(chan error, 1), dataDir: dataDir}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.all.Write(append(sc.Bytes(), '\n'))
			select {
			case p.lines <- sc.Text():
			default: // nobody is reading: drop
			}
		}
		close(p.lines)
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			// What the daemon said is what explains a failure that
			// does not happen twice.
			t.Logf("tollgated's log (%s):\n%s", dataDir, lastBytes(p.all.String(), 16<<10))
		}
	})
	ready := p.waitFor("tollgated ready", 15*time.Second)
	var m struct{ Listen, Admin string }
	if err := json.Unmarshal([]byte(ready), &m); err != nil || m.Listen == "" || m.Admin == "" {
		t.Fatalf("ready line %q: %v", ready, err)
	}
	p.listen, p.adm = m.Listen, m.Admin
	return p
}

// lastBytes is the end of s, at most n bytes from a line's start.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// waitFor returns the first log line containing what.
func (p *proc) waitFor(what string, within time.Duration) string {
	p.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("tollgated ended before %q:\n%s", what, p.all.String())
			}
			if strings.Contains(l, what) {
				return l
			}
		case <-deadline:
			p.t.Fatalf("no %q within %v", what, within)
		}
	}
}

// kill9 kills the process without warning.
func (p *proc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			p.t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		p.t.Fatal("no exit within 30 s of SIGTERM")
	}
}

// adminCall sends a JSON request to the admin API and decodes the answer.
func (p *proc) adminCall(method, path string, body any, want int) map[string]any {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+p.adm+path, rd)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		p.t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	var m map[string]any
	json.Unmarshal(raw, &m)
	return m
}

// provision creates account id funded with units and a per-request price
// of price units, and returns a new API key for it.
func (p *proc) provision(id string, units, price uint64) string {
	p.t.Helper()
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": id}, http.StatusCreated)
	p.adminCall("PUT", "/v1/accounts/"+id+"/policy", map[string]any{
		"permissions": []string{"chat"},
		"operations":  map[string]any{"requests": map[string]any{"weight": price}},
		"limits":      map[string]any{"max_items": 10, "hold_timeout_ms": 30000},
	}, http.StatusOK)
	p.adminCall("POST", "/v1/accounts/"+id+"/deposits", map[string]any{"units": units, "idempotency_key": "initial"}, http.StatusCreated)
	k := p.adminCall("POST", "/v1/accounts/"+id+"/keys", nil, http.StatusCreated)
	key, _ := k["key"].(string)
	if key == "" {
		p.t.Fatalf("no key in %v", k)
	}
	return key
}

// openLedger opens a stopped daemon's ledger directly.
func openLedger(t *testing.T, dataDir string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(dataDir, ledgerFile), boltstore.Options{UsageHistory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
