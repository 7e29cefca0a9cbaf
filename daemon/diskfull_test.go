//go:build linux

package daemon

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/invariant"
	"github.com/tollgated/tollgated/spool"
)

// TestAFailedSyncStopsBillingAndReadinessSaysSo: a spool whose fdatasync
// fails (EIO, injected into the running daemon's spool) is broken for
// good: /readyz and /healthz say storage-failed, checks are refused at
// once, and they stay refused when the disk answers again — the pages the
// failed sync held may be gone, so only a restart goes on.
func TestAFailedSyncStopsBillingAndReadinessSaysSo(t *testing.T) {
	defer invariant.CountInTests()() // the plane reports the broken spool as a violation
	var logs syncBuffer
	d, err := Open(testConfig(t.TempDir()), zerolog.New(&logs), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	addr, adm := d.Addr(), d.AdminAddr()
	if c := timedCheck(t, addr, "k-demo"); c.status != 200 {
		t.Fatalf("check before the fault: %d %s", c.status, c.code)
	}
	fault := true
	var mu sync.Mutex
	d.spool.SetDiskFault(func(op spool.DiskOp, _, _ int64) error {
		mu.Lock()
		defer mu.Unlock()
		if op == spool.OpSync && fault {
			return syscall.EIO
		}
		return nil
	})
	// The check whose usage meets the failed sync is never acknowledged.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/check", strings.NewReader(`{"workload":[{"op":"requests","count":1}]}`))
	req.Header.Set("Authorization", "Bearer k-demo")
	go func() {
		if resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	await.True(t, "/readyz to say storage-failed after a failed sync", func() bool {
		st, code := statusCode(t, "http://"+addr+"/readyz")
		return st == 503 && code == "storage-failed"
	})
	mu.Lock()
	fault = false // the disk answers again: the spool stays broken
	mu.Unlock()
	for range 3 {
		if c := timedCheck(t, addr, "k-demo"); c.status != 503 || c.code != "storage-failed" || c.took > time.Second {
			t.Fatalf("check after a failed sync: %d %s in %v", c.status, c.code, c.took)
		}
	}
	if st, code := statusCode(t, "http://"+adm+"/healthz"); st != 503 || code != "storage-failed" {
		t.Fatalf("/healthz after a failed sync: %d %s", st, code)
	}
	start := time.Now()
	d.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("shutdown with a broken spool took %v", took)
	}
	if !strings.Contains(logs.String(), "a write or sync failed") {
		t.Fatalf("no log line says the spool failed:\n%s", logs.String())
	}
}
