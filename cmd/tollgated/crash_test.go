//go:build linux

package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// acked is what a load run saw acknowledged: request id → units.
type acked struct {
	mu     sync.Mutex
	units  map[string]uint64
	denied map[string]int // status and problem code → count
	wait   func()         // until every load goroutine has stopped
	// slowest is the longest a request took to be answered.
	slowest time.Duration
}

// load sends /v1/check for key from conns connections until ctx ends or
// the server goes away, recording every 200.
func load(ctx context.Context, addr, key string, conns int) *acked {
	return loadUntil(ctx, nil, addr, key, conns, 5*time.Second)
}

// loadUntil is load that also stops, between requests, once stop is
// closed: every request sent is answered and recorded, so what was
// acknowledged is exactly what the server billed. A request not answered
// within timeout ends its connection's load.
func loadUntil(ctx context.Context, stop <-chan struct{}, addr, key string, conns int, timeout time.Duration) *acked {
	return loadPaced(ctx, stop, addr, key, conns, timeout, nil)
}

// loadPaced is loadUntil with each check waiting for a tick of pace first
// (nil: no pacing), so that conns connections share pace's rate.
func loadPaced(ctx context.Context, stop <-chan struct{}, addr, key string, conns int, timeout time.Duration, pace <-chan struct{}) *acked {
	a := &acked{units: make(map[string]uint64), denied: make(map[string]int)}
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for ctx.Err() == nil && !closed(stop) {
				if pace != nil {
					select {
					case <-pace:
					case <-stop:
						return
					case <-ctx.Done():
						return
					}
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/v1/check",
					strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				sent := time.Now()
				resp, err := client.Do(req)
				took := time.Since(sent)
				a.mu.Lock()
				a.slowest = max(a.slowest, took)
				a.mu.Unlock()
				if err != nil {
					if ctx.Err() == nil {
						a.mu.Lock()
						a.denied["error "+err.Error()]++
						a.mu.Unlock()
					}
					return // killed, or ctx ended
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var m struct {
					RequestID string `json:"request_id"`
					Units     uint64 `json:"units"`
					Code      string `json:"code"`
				}
				decoded := json.Unmarshal(body, &m) == nil
				a.mu.Lock()
				if resp.StatusCode == 200 && decoded && m.RequestID != "" {
					a.units[m.RequestID] = m.Units
				} else {
					a.denied[strconv.Itoa(resp.StatusCode)+" "+m.Code]++
				}
				a.mu.Unlock()
			}
		}()
	}
	a.wait = wg.Wait
	return a
}

// closed reports whether c is closed (never, for nil).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// usageByID reads every usage event of account from the ledger.
func usageByID(t *testing.T, s ledger.Store, account core.AccountID) map[string]ledger.Usage {
	t.Helper()
	evs, err := s.UsageOf(context.Background(), account, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]ledger.Usage, len(evs))
	for _, e := range evs {
		id := hex.EncodeToString(e.ID[:])
		if _, dup := out[id]; dup {
			t.Fatalf("usage %s recorded twice", id)
		}
		out[id] = e
	}
	return out
}

// TestKill9LosesNoAcknowledgedUsage: a real tollgated under load is killed
// with SIGKILL, restarted on the same data directory, and stopped. Every
// usage event a client saw acknowledged is billed exactly once, the ledger
// conserves units, the crashed run's leases are settled by the restart
// from its spool (none is left active for the ledger to forfeit), and the
// account never spent more than it was funded.
func TestKill9LosesNoAcknowledgedUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--lease-ttl", "5s", "--lease-grace", "1s", "--usage-history", "1000000"}
	const funded, price = 60_000, 10
	p := startProc(t, dir, flags...)
	key := p.provision("crash", funded, price)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := load(ctx, p.listen, key, 16)
	a.awaitAcked(t, 2000) // a third of what the account can pay for
	p.kill9()
	a.wait()
	cancel()
	if len(a.units) == 0 {
		t.Fatalf("no request was admitted before the kill (denials %v)", a.denied)
	}
	t.Logf("acknowledged before kill -9: %d (other answers %v)", len(a.units), a.denied)

	// The restarted node settles the dead run's leases from its spool
	// before it is ready (control.Recover), and its clean stop bills the
	// rest and hands its own leases back: nothing is left active for the
	// ledger to forfeit past expiry and grace (checked below), so there is
	// no need to wait for them.
	p = startProc(t, dir, flags...)
	p.stop()
	billedExactlyOnce(t, dir, "crash", a)
}

// billedExactlyOnce checks a stopped daemon's ledger after a kill -9 and
// a restart: it conserves units, every usage event a's client saw
// acknowledged is billed once at its units, the account's settled total
// is its usage, within its deposits, and no lease is left active.
func billedExactlyOnce(t *testing.T, dir string, account core.AccountID, a *acked) {
	t.Helper()
	s := openLedger(t, dir)
	ctxb := context.Background()
	if err := s.Check(ctxb); err != nil {
		t.Fatalf("ledger not conserved: %v", err)
	}
	usage := usageByID(t, s, account)
	for id, units := range a.units {
		u, ok := usage[id]
		if !ok {
			t.Fatalf("acknowledged usage %s is not in the ledger (%d acknowledged, %d billed)", id, len(a.units), len(usage))
		}
		if uint64(u.Units) != units {
			t.Fatalf("usage %s billed %d, acknowledged %d", id, u.Units, units)
		}
	}
	acct, err := s.Account(ctxb, account)
	if err != nil {
		t.Fatal(err)
	}
	var billed core.CostUnits
	for _, u := range usage {
		billed += u.Units
	}
	if acct.Settled != billed {
		t.Fatalf("settled %d, usage records sum to %d", acct.Settled, billed)
	}
	if acct.Settled > acct.Deposited || acct.Overage != 0 {
		t.Fatalf("spent %d (overage %d) of %d funded", acct.Settled, acct.Overage, acct.Deposited)
	}
	active, err := s.Leases(ctxb, true)
	if err != nil || len(active) != 0 {
		t.Fatalf("active leases after the restart's clean stop: %v %v", active, err)
	}
	if acct.Outstanding != 0 {
		t.Fatalf("outstanding %d with no active lease", acct.Outstanding)
	}
	t.Logf("ledger: deposited %d, settled %d (%d events; %d acknowledged), loss %d, balance %d",
		acct.Deposited, acct.Settled, len(usage), len(a.units), acct.Loss, acct.Balance())
}

// TestSIGTERMReturnsUnspentUnitsAndBillsEverything: stopping under load
// releases every lease (nothing forfeited, nothing outstanding) and bills
// every event, acknowledged or not yet.
func TestSIGTERMReturnsUnspentUnitsAndBillsEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	const funded, price = 1_000_000, 10
	p := startProc(t, dir, "--usage-history", "1000000")
	key := p.provision("graceful", funded, price)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := load(ctx, p.listen, key, 8)
	a.awaitAcked(t, 500)
	p.stop()
	cancel()
	a.wait()

	s := openLedger(t, dir)
	ctxb := context.Background()
	if err := s.Check(ctxb); err != nil {
		t.Fatalf("ledger not conserved: %v", err)
	}
	usage := usageByID(t, s, "graceful")
	for id := range a.units {
		if _, ok := usage[id]; !ok {
			t.Fatalf("acknowledged usage %s not billed", id)
		}
	}
	acct, _ := s.Account(ctxb, "graceful")
	if acct.Outstanding != 0 || acct.Loss != 0 {
		t.Fatalf("after SIGTERM: outstanding %d, loss %d; want both 0", acct.Outstanding, acct.Loss)
	}
	if acct.Balance()+acct.Settled != acct.Deposited {
		t.Fatalf("balance %d + settled %d != deposited %d: unspent units not returned", acct.Balance(), acct.Settled, acct.Deposited)
	}
	if active, _ := s.Leases(ctxb, true); len(active) != 0 {
		t.Fatalf("%d leases still active", len(active))
	}
	t.Logf("%d acknowledged, %d billed, balance %d of %d", len(a.units), len(usage), acct.Balance(), acct.Deposited)
}
