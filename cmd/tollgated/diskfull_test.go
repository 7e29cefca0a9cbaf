//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// smallFilesystem mounts a tmpfs of size under a temporary directory, for
// a data directory whose disk a test fills, and unmounts it at the end. It
// skips the test where this process may not mount (not root): the spool's
// own tests cover a full disk through injected faults there.
func smallFilesystem(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillFilesystem writes path until its filesystem has no room left.
func fillFilesystem(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// checkAnswer is one /v1/check as a client saw it.
type checkAnswer struct {
	status     int
	code, id   string
	retryAfter string
	took       time.Duration
}

func timedCheck(t *testing.T, addr, key string) checkAnswer {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/check",
		strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	defer resp.Body.Close()
	var m struct {
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	}
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &m)
	return checkAnswer{resp.StatusCode, m.Code, m.RequestID, resp.Header.Get("Retry-After"), time.Since(start)}
}

// statusCode is GET url's status and problem code.
func statusCode(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	st, _, raw := httpCall(t, "GET", url, auth, nil)
	var m struct{ Code string }
	json.Unmarshal(raw, &m)
	return st, m.Code
}

// fillUntilRefused fills the data directory's filesystem and keeps 8
// connections of checks going until the first is refused storage-full;
// it returns what they saw.
func fillUntilRefused(t *testing.T, p *proc, key, filler string) *acked {
	t.Helper()
	fillFilesystem(t, filler)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	a := loadUntil(ctx, stop, p.listen, key, 8, 10*time.Second)
	refusedFull := await.Poll(await.Default, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.denied["503 storage-full"] > 0 || len(a.denied) > 0
	})
	close(stop)
	a.wait()
	if !refusedFull || a.denied["503 storage-full"] == 0 {
		t.Fatalf("a full disk: %d admitted, then refused %v (want storage-full)", len(a.units), a.denied)
	}
	return a
}

// TestAFullDiskIsRefusedAtOnceAndRecoversByItself: a real daemon whose
// data directory's filesystem fills up refuses checks 503 storage-full at
// once (never a 504 after waiting for the disk), says so on /readyz,
// /healthz and /metrics and in one log line, serves again by itself once
// space is freed, and stops promptly on SIGTERM while the disk is full.
// Every check answered 200 — before, during and after the faults — is
// billed exactly once, and nothing else is.
func TestAFullDiskIsRefusedAtOnceAndRecoversByItself(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	mnt := smallFilesystem(t, "32m")
	dir, filler := filepath.Join(mnt, "data"), filepath.Join(mnt, "filler")
	p := startProc(t, dir, "--usage-history", "1000000")
	key := p.provision("acme", 1<<40, 1)
	acknowledged := map[string]bool{}
	admitted := func(a *acked) {
		for id := range a.units {
			acknowledged[id] = true
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	before := loadUntil(ctx, stop, p.listen, key, 4, 5*time.Second)
	before.awaitAcked(t, 500) // the daemon is under load before the disk fills
	close(stop)
	before.wait()
	admitted(before)
	if len(before.units) == 0 || len(before.denied) != 0 {
		t.Fatalf("before the fault: %d admitted, refused %v", len(before.units), before.denied)
	}

	during := fillUntilRefused(t, p, key, filler)
	admitted(during)
	for what := range during.denied {
		if what != "503 storage-full" {
			t.Fatalf("with the disk full, checks were answered %v (want only 200 and 503 storage-full)", during.denied)
		}
	}
	if during.slowest > time.Second {
		t.Fatalf("with the disk full a check took %v to be answered", during.slowest)
	}
	for range 5 {
		c := timedCheck(t, p.listen, key)
		if c.status != 503 || c.code != "storage-full" || c.retryAfter == "" || c.took > time.Second {
			t.Fatalf("check with the disk full: %d %s, Retry-After %q, in %v", c.status, c.code, c.retryAfter, c.took)
		}
	}
	if st, code := statusCode(t, "http://"+p.listen+"/readyz", ""); st != 503 || code != "storage-full" {
		t.Fatalf("/readyz with the disk full: %d %s", st, code)
	}
	if st, code := statusCode(t, "http://"+p.adm+"/healthz", ""); st != 503 || code != "storage-full" {
		t.Fatalf("/healthz with the disk full: %d %s", st, code)
	}
	if m := p.scrape(); !strings.Contains(m, "tollgated_spool_storage_full 1") ||
		!strings.Contains(m, `tollgated_denials_total{reason="storage-full"}`) {
		t.Fatalf("metrics do not say the disk is full")
	}
	t.Logf("disk full: %d checks admitted into the spool's reserve, %v refused; slowest %v", len(during.units), during.denied, during.slowest)

	// Room again: served without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var c checkAnswer
	await.True(t, "a check admitted once space was freed", func() bool {
		if c = timedCheck(t, p.listen, key); c.status != 200 && c.code != "storage-full" {
			t.Fatalf("after space was freed: %d %s", c.status, c.code)
		}
		return c.status == 200
	})
	acknowledged[c.id] = true
	if st, code := statusCode(t, "http://"+p.listen+"/readyz", ""); st != 200 {
		t.Fatalf("/readyz once there is room: %d %s", st, code)
	}
	p.waitFor("usage spool: room again", 5*time.Second)
	if st, code := statusCode(t, "http://"+p.adm+"/healthz", ""); st != 200 {
		t.Fatalf("/healthz once there is room: %d %s", st, code)
	}

	// Full again, then SIGTERM: it stops promptly.
	admitted(fillUntilRefused(t, p, key, filler))
	start := time.Now()
	p.stop()
	stopped := time.Since(start)
	if stopped > 2*time.Second {
		t.Fatalf("SIGTERM with the disk full took %v", stopped)
	}
	if n := strings.Count(p.all.String(), "its filesystem is full"); n != 2 {
		t.Fatalf("%d log lines say the filesystem is full, want one per episode (2):\n%s", n, p.all.String())
	}

	// What the full disk kept from the ledger is billed by the next start.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	startProc(t, dir, "--usage-history", "1000000").stop()
	s := openLedger(t, dir)
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("ledger not conserved: %v", err)
	}
	usage := usageByID(t, s, "acme")
	for id := range acknowledged {
		if _, ok := usage[id]; !ok {
			t.Fatalf("acknowledged check %s not billed", id)
		}
	}
	if len(usage) != len(acknowledged) {
		t.Fatalf("%d checks billed, %d acknowledged: a refused check was billed", len(usage), len(acknowledged))
	}
	t.Logf("%d checks acknowledged, each billed once; SIGTERM with the disk full took %v", len(acknowledged), stopped)
}
