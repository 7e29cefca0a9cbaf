//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// runFailingProc runs tollgated with args (plus the test admin token) and
// expects it to exit on its own within 20 s; it returns the exit status
// and what it wrote to stderr.
func runFailingProc(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TOLLGATED_TEST_AS_DAEMON=1", "TOLLGATED_TEST_ARGS="+strings.Join(args, " "),
		"TOLLGATED_ADMIN_TOKEN="+testAdminToken)
	if bin := os.Getenv("TOLLGATED_TEST_BINARY"); bin != "" { // another build, as startProc runs it
		cmd = exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TOLLGATED_ADMIN_TOKEN="+testAdminToken)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("tollgated %v did not exit on its own:\n%s", args, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// probe is a client that opens a new connection for every request, for as
// long as it runs, and tallies how each ended.
type probe struct {
	mu       sync.Mutex
	refused  int
	statuses map[int]int
	bodies   map[int]string // the first body seen per status
	failures []string       // anything but a refusal or an answer
}

// run sends req over new connections to addr until stop closes.
func (p *probe) run(addr, req string, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-stop:
			return
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			p.mu.Lock()
			p.refused++
			p.mu.Unlock()
			time.Sleep(200 * time.Microsecond)
			continue
		}
		if err != nil {
			p.fail(err.Error())
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			p.fail("reading the answer: " + err.Error())
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		p.mu.Lock()
		p.statuses[resp.StatusCode]++
		if _, ok := p.bodies[resp.StatusCode]; !ok {
			p.bodies[resp.StatusCode] = string(body)
		}
		p.mu.Unlock()
	}
}

// counts reads one of p's counts while the probe runs.
func (p *probe) counts(n func() int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return n()
}

func (p *probe) fail(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failures) < 10 {
		p.failures = append(p.failures, s)
	}
}

// TestRestartedDaemonNeverAnswers401DuringStartUp: clients connect all the
// time a daemon restarts on the same data directory and address, with a
// customer key and a platform token provisioned before the restart. They
// are refused until the node is ready and then answered as provisioned:
// never 401 (before the fix, the shards listened before the ledger was
// loaded and answered 401 for ~20 ms).
func TestRestartedDaemonNeverAnswers401DuringStartUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	p := startProc(t, dir)
	key := p.provision("acme", 1<<40, 1)
	token := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)
	addr := p.listen
	p.stop()

	body := `{"permission":"chat","workload":[{"op":"requests","count":1}]}`
	check := "POST /v1/check HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key + "\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	admission := "GET /v1/admission?agent_id=acme HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + token +
		"\r\nConnection: close\r\n\r\n"
	probes := map[string]*probe{"check": {}, "admission": {}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for name, pr := range probes {
		pr.statuses, pr.bodies = map[int]int{}, map[int]string{}
		req := check
		if name == "admission" {
			req = admission
		}
		for range 2 {
			wg.Add(1)
			go pr.run(addr, req, stop, &wg)
		}
	}
	for name, pr := range probes {
		await.True(t, name+" clients refused before the start", func() bool { return pr.counts(func() int { return pr.refused }) > 0 })
	}
	p = startProc(t, dir, "--listen", addr)
	for name, pr := range probes {
		await.True(t, name+" clients answered after the start", func() bool {
			return pr.counts(func() int { return pr.statuses[http.StatusOK] }) >= 20
		})
	}
	close(stop)
	wg.Wait()
	p.stop()

	for name, pr := range probes {
		t.Logf("%s: %d refused, answers %v", name, pr.refused, pr.statuses)
		if len(pr.failures) > 0 {
			t.Errorf("%s: connections failed otherwise than refused: %v", name, pr.failures)
		}
		if pr.refused == 0 {
			t.Errorf("%s: never refused: the probe did not run during start-up", name)
		}
		for status, n := range pr.statuses {
			if status != http.StatusOK {
				t.Errorf("%s: %d answers %d during start-up, e.g. %s", name, n, status, pr.bodies[status])
			}
		}
		if pr.statuses[http.StatusOK] == 0 {
			t.Errorf("%s: never answered after start-up", name)
		}
	}
	if b := probes["admission"].bodies[http.StatusOK]; !strings.Contains(b, `"decision":"admit"`) {
		t.Errorf("admission answer %s", b)
	}
}

// TestSecondDaemonOnTheSameAddressIsRefused: a second daemon, with its own
// data directory, on the data-plane or the admin address of a running one
// exits non-zero naming the address, and the first keeps every client.
func TestSecondDaemonOnTheSameAddressIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	first := startProc(t, t.TempDir())
	key := first.provision("acme", 1<<40, 1)
	for _, c := range []struct{ name, listen, admin, addr string }{
		{"data plane", first.listen, "127.0.0.1:0", first.listen},
		{"admin", "127.0.0.1:0", first.adm, first.adm},
	} {
		code, stderr := runFailingProc(t, "--listen", c.listen, "--admin", c.admin, "--data-dir", t.TempDir(), "--shards", "2")
		if code == 0 || !strings.Contains(stderr, c.addr) || !strings.Contains(stderr, "already served by another process") {
			t.Fatalf("second daemon on the %s address %s: exit %d, stderr:\n%s", c.name, c.addr, code, stderr)
		}
		t.Logf("%s: exit %d: %s", c.name, code, lastLine(stderr))
	}
	// Every connection still reaches the first daemon, which knows the key.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 40 {
		req, _ := http.NewRequest("POST", "http://"+first.listen+"/v1/check",
			strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d to the first daemon: %d", i, resp.StatusCode)
		}
	}
	first.stop()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runDaemon runs tollgated in this process until it is ready (or fails):
// it returns the exit status if it ended, and a stop function otherwise.
func runDaemon(t *testing.T, args ...string) (code int, logs *syncBuffer, stop func()) {
	t.Helper()
	logs = &syncBuffer{}
	args = append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--shards", "1"}, args...)
	quit := make(chan struct{})
	exit := make(chan int, 1)
	go func() {
		exit <- run(args, func(k string) string { return map[string]string{"TOLLGATED_ADMIN_TOKEN": testAdminToken}[k] }, io.Discard, logs, quit)
	}()
	deadline := time.After(15 * time.Second)
	for !strings.Contains(logs.String(), "tollgated ready") {
		select {
		case c := <-exit:
			return c, logs, nil
		case <-deadline:
			t.Fatalf("neither ready nor ended:\n%s", logs.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return -1, logs, func() {
		close(quit)
		if c := <-exit; c != 0 {
			t.Fatalf("exit %d after stop:\n%s", c, logs.String())
		}
	}
}

// TestSecretMismatchIsRefused: a data directory remembers the secret its
// keys were issued under (a fingerprint in the ledger); a start with any
// other secret fails, naming where the secret came from, instead of
// answering every key 401.
func TestSecretMismatchIsRefused(t *testing.T) {
	dir := t.TempDir()
	secretA, secretB := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	code, logs, stop := runDaemon(t, "--data-dir", dir, "--secret", secretA)
	if stop == nil {
		t.Fatalf("first start: exit %d\n%s", code, logs.String())
	}
	stop()
	if !strings.Contains(logs.String(), "stored the server secret's fingerprint") {
		t.Fatalf("no fingerprint stored:\n%s", logs.String())
	}

	code, logs, _ = runDaemon(t, "--data-dir", dir, "--secret", secretB)
	if code != 1 || !strings.Contains(logs.String(), "not the one this ledger's keys were issued under") {
		t.Fatalf("start under another secret: exit %d\n%s", code, logs.String())
	}
	if strings.Contains(logs.String(), secretB) || strings.Contains(logs.String(), secretA) {
		t.Fatal("a secret was logged")
	}
	// No --secret: the data directory's own (new) secret file is another
	// secret too.
	code, logs, _ = runDaemon(t, "--data-dir", dir)
	if code != 1 || !strings.Contains(logs.String(), filepath.Join(dir, secretFile)) {
		t.Fatalf("start under the data directory's secret: exit %d\n%s", code, logs.String())
	}
	// That start generated the file; refused, it leaves none behind.
	if _, err := os.Stat(filepath.Join(dir, secretFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused start left the secret it generated: %v", err)
	}

	file := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(file, []byte(secretA+"\n"), 0o600)
	code, logs, stop = runDaemon(t, "--data-dir", dir, "--secret-file", file)
	if stop == nil {
		t.Fatalf("start with the first secret from a file: exit %d\n%s", code, logs.String())
	}
	stop()
}

// TestExistingLedgerAdoptsTheSecretFingerprint: a ledger from before
// fingerprints takes the fingerprint of the secret it is next started
// with.
func TestExistingLedgerAdoptsTheSecretFingerprint(t *testing.T) {
	dir := t.TempDir()
	s := openLedger(t, dir)
	if _, ok, err := s.SecretFingerprint(context.Background()); ok || err != nil {
		t.Fatalf("fresh ledger has a fingerprint: %v %v", ok, err)
	}
	s.Close()
	secret := strings.Repeat("c3", 32)
	code, logs, stop := runDaemon(t, "--data-dir", dir, "--secret", secret)
	if stop == nil {
		t.Fatalf("exit %d\n%s", code, logs.String())
	}
	stop()
	s = openLedger(t, dir)
	fp, ok, err := s.SecretFingerprint(context.Background())
	raw, _ := hex.DecodeString(secret)
	if !ok || err != nil || fp != secretFingerprint(raw) {
		t.Fatalf("fingerprint %x, %v, %v; want %x", fp, ok, err, secretFingerprint(raw))
	}
}

// TestUnknownEnvironmentVariablesAreReported: a real process warns once
// per TOLLGATED_ variable no flag reads, naming it, and still starts.
func TestUnknownEnvironmentVariablesAreReported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	p := startProcEnv(t, t.TempDir(), []string{"TOLLGATED_LISTNE=127.0.0.1:1", "TOLLGATED_LOG_LEVEL=info", "TOLLGATED_SECRETFILE=/x"})
	p.stop()
	logs := p.all.String()
	for _, name := range []string{"TOLLGATED_LISTNE", "TOLLGATED_SECRETFILE"} {
		if n := strings.Count(logs, `"variable":"`+name+`"`); n != 1 {
			t.Fatalf("%s reported %d times:\n%s", name, n, logs)
		}
	}
	if strings.Contains(logs, `"variable":"TOLLGATED_LOG_LEVEL"`) || strings.Contains(logs, `"variable":"TOLLGATED_ADMIN_TOKEN"`) {
		t.Fatalf("a known variable reported:\n%s", logs)
	}
}
