package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// TestFirstRequestAfterIdleIsAdmitted: once an idle account's lease slice
// has lapsed on the shards, its next request is answered 200 after the
// shard fetches funding, not 503 lease-*: the shard waits for the grant.
// The same daemon with --funding-wait 0 answers 503, which shows the test
// reaches the refusal it is about.
func TestFirstRequestAfterIdleIsAdmitted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	for _, c := range []struct {
		wait string
		want int
	}{{"200ms", http.StatusOK}, {"0s", http.StatusServiceUnavailable}} {
		t.Run("funding-wait="+c.wait, func(t *testing.T) {
			t.Parallel()
			p := startProc(t, t.TempDir(), "--lease-ttl", "5s", "--funding-wait", c.wait)
			// The README's quickstart account: a daily budget and rate limits.
			p.adminCall("POST", "/v1/accounts", map[string]any{"id": "idle"}, http.StatusCreated)
			p.adminCall("PUT", "/v1/accounts/idle/budget", map[string]any{"allowance": 100000, "period": "day"}, http.StatusOK)
			p.adminCall("PUT", "/v1/accounts/idle/policy", map[string]any{
				"permissions": []string{"chat"},
				"operations":  map[string]any{"requests": map[string]any{"weight": 10}},
				"limits":      map[string]any{"max_items": 100, "request_rate": 100, "request_burst": 200},
			}, http.StatusOK)
			k := p.adminCall("POST", "/v1/accounts/idle/keys", nil, http.StatusCreated)
			key, _ := k["key"].(string)
			// Leases follow demand: nothing is funded before the first
			// request (without a funding wait it may be refused while the
			// first lease is fetched).
			var st int
			var body string
			if !await.Poll(await.Default, func() bool { st, body = checkOnce(t, p, key); return st == http.StatusOK }) {
				t.Fatalf("first request: %d %s", st, body)
			}
			// Idle past the lease's renewal: the plane asks the shards'
			// slices back and hands the lease back to the ledger (and
			// any successor lease taken while the first was still warm).
			// Once the ledger holds nothing in leases for the account, no
			// shard holds a slice of it.
			// The release is counted once its commit's outcome is back on
			// the plane, after the ledger already shows it: wait for both.
			p.awaitLeasesBack("idle")
			await.True(t, "a lease released", func() bool {
				return p.metric(`tollgated_lease_operations_total{operation="released"}`) > 0
			})
			start := time.Now()
			st, body = checkOnce(t, p, key)
			if st != c.want {
				t.Fatalf("first request after idle: %d %s, want %d", st, body, c.want)
			}
			t.Logf("first request after idle: %d in %v", st, time.Since(start).Round(time.Microsecond))
			p.stop()
		})
	}
}

func checkOnce(t *testing.T, p *proc, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+p.listen+"/v1/check",
		strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
