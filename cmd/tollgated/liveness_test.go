//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/internal/pgtest"
)

// Money that exists is spendable (docs/INVARIANTS.md, funding liveness):
// after any drain, a request the account can still pay is admitted within
// the funding wait, and one it cannot is refused 402 with the true
// remainder — never 503 lease-* as a steady state while units sit in a
// slice or a lease.

// priced sends /v1/check bodies of a fixed price over one connection of
// its own, so that concurrent senders spread over the shards.
type priced struct {
	addr, key, body string
	client          *http.Client
}

func newPriced(addr, key string, inputTokens int) *priced {
	return &priced{addr: addr, key: key, client: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 1}},
		body: fmt.Sprintf(`{"permission":"chat","workload":[{"op":"input_tokens","count":%d}]}`, inputTokens)}
}

// answer is one /v1/check outcome.
type answer struct {
	status    int
	code      string
	remaining uint64
	took      time.Duration
}

func (p *priced) check() (answer, error) {
	req, _ := http.NewRequest("POST", "http://"+p.addr+"/v1/check", strings.NewReader(p.body))
	req.Header.Set("Authorization", "Bearer "+p.key)
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m struct {
		Code      string `json:"code"`
		Remaining uint64 `json:"remaining"`
	}
	json.Unmarshal(raw, &m)
	return answer{status: resp.StatusCode, code: m.Code, remaining: m.Remaining, took: time.Since(start)}, nil
}

// drainAccount sends checks from conns connections until each has been
// refused 402 (or 429, then again), and returns every status seen.
func drainAccount(t *testing.T, addr, key string, inputTokens, conns int) map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := newPriced(addr, key, inputTokens)
			for ctx.Err() == nil {
				a, err := p.check()
				if err != nil {
					t.Errorf("drain: %v", err)
					return
				}
				mu.Lock()
				seen[fmt.Sprintf("%d %s", a.status, a.code)]++
				mu.Unlock()
				if a.status == http.StatusPaymentRequired {
					return
				}
				if a.status == http.StatusTooManyRequests {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the drain did not end in 402 on every connection: %v", seen)
	}
	return seen
}

// spendTheRest sends small checks, round robin over conns connections,
// until one is refused 402. Every answer must be 200 or 402: a 503 means a
// request the account could pay waited out the whole funding wait.
func spendTheRest(t *testing.T, addr, key string, inputTokens, conns int) (admitted int, last answer) {
	t.Helper()
	var ps []*priced
	for range conns {
		ps = append(ps, newPriced(addr, key, inputTokens))
	}
	for i := 0; ; i++ {
		a, err := ps[i%conns].check()
		if err != nil {
			t.Fatal(err)
		}
		switch a.status {
		case http.StatusOK:
			admitted++
		case http.StatusPaymentRequired:
			return admitted, a
		case http.StatusTooManyRequests:
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatalf("after %d small checks admitted, a %d-unit check was answered %d %s in %v: money that exists must be spendable or refused 402",
				admitted, inputTokens, a.status, a.code, a.took)
		}
		if admitted > 1_000_000 {
			t.Fatal("never refused")
		}
	}
}

// TestADrainedAccountSpendsItsLastUnits is the single-node reproduction:
// two shards, an account with a daily allowance drained by four
// connections of 1,210-unit checks, then 5-unit checks until the account
// is refused 402 with less than 5 units left — twenty times over, with a
// top-up between rounds. Before funding liveness, the units left after the
// drain (hundreds) sat in a lease no request could draw on, and every
// check was answered 503 lease-exhausted for minutes.
func TestADrainedAccountSpendsItsLastUnits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	p := startProc(t, t.TempDir())
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "drain"}, http.StatusCreated)
	p.adminCall("PUT", "/v1/accounts/drain/budget", map[string]any{"allowance": 20000, "period": "day"}, http.StatusOK)
	p.adminCall("PUT", "/v1/accounts/drain/policy", map[string]any{
		"permissions": []string{"chat"},
		"operations":  map[string]any{"input_tokens": map[string]any{"weight": 1}, "requests": map[string]any{"weight": 10}},
		"limits":      map[string]any{"max_items": 100000, "request_rate": 200, "request_burst": 200},
	}, http.StatusOK)
	k := p.adminCall("POST", "/v1/accounts/drain/keys", nil, http.StatusCreated)
	key, _ := k["key"].(string)
	const rounds = 20
	for round := range rounds {
		if round > 0 {
			p.adminCall("POST", "/v1/accounts/drain/deposits", map[string]any{"units": 20000,
				"idempotency_key": fmt.Sprintf("round-%d", round)}, http.StatusCreated)
		}
		drained := drainAccount(t, p.listen, key, 1210, 4)
		admitted, last := spendTheRest(t, p.listen, key, 5, 4)
		if last.remaining >= 5 {
			t.Fatalf("round %d: refused 402 %s with %d units remaining, enough for the check", round, last.code, last.remaining)
		}
		acct := p.adminCall("GET", "/v1/accounts/drain", nil, http.StatusOK)
		if avail := fundsOf(acct)["can_spend"]; avail >= 5 {
			t.Fatalf("round %d: %v units can be spent after the 402 (drain %v, then %d five-unit checks admitted, refused %s remaining %d): %v",
				round, avail, drained, admitted, last.code, last.remaining, acct)
		}
		t.Logf("round %d: drain %v; then %d five-unit checks admitted, refused 402 %s (remaining %d) in %v",
			round, drained, admitted, last.code, last.remaining, last.took.Round(time.Microsecond))
	}
	p.stop()
}

// TestAFleetSpendsItsLastUnitsOnEveryNode is the fleet reproduction: three
// nodes on one PostgreSQL ledger, an account of 1,000 units and 7-unit
// checks, so the last units end up split over the nodes' leases. After a
// drain from every node, each node answers a check 200 or 402 — never 503
// lease-* as a steady state — until the fleet has spent all it can (less
// than one check's price left); twenty times over, with a deposit between
// rounds. Before recalls, the last 13 units sat split 5/5/3 over three
// leases and every node answered 503 for about half a minute.
func TestAFleetSpendsItsLastUnitsOnEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	url := pgtest.Database(t)
	var nodes []*proc
	for i := range 3 {
		nodes = append(nodes, startProc(t, t.TempDir(), fleetFlags(url, i)...))
	}
	key := nodes[0].provision("odd", 1000, 7)
	for _, n := range nodes[1:] {
		waitKnown(t, n, key)
	}
	tok, _ := nodes[0].adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)
	deposited := uint64(1000)
	var spent uint64
	const rounds = 20
	for round := range rounds {
		if round > 0 {
			nodes[round%3].adminCall("POST", "/v1/accounts/odd/deposits", map[string]any{"units": 1000,
				"idempotency_key": fmt.Sprintf("round-%d", round)}, http.StatusCreated)
			deposited += 1000
			// A deposit reaches the other nodes' evidence within the
			// fleet's propagation bound (invariant 57): until then a node
			// may still refuse 402 on what it last heard.
			for _, n := range nodes {
				awaitAdmission(t, n, tok, "odd", `"admit"`)
			}
		}
		var wg sync.WaitGroup
		admitted := make([]int, len(nodes))
		runs := make([]time.Duration, len(nodes))
		for i, n := range nodes {
			wg.Go(func() { admitted[i], runs[i] = spendOddChecks(t, n.listen, key, 2) })
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for _, a := range admitted {
			spent += uint64(a) * 7
		}
		if left := deposited - spent; left >= 7 {
			t.Logf("the account: %v", nodes[0].adminCall("GET", "/v1/accounts/odd", nil, http.StatusOK))
			t.Fatalf("round %d: every node refused 402 with %d units left of %d deposited (admitted %v)", round, left, deposited, admitted)
		}
		t.Logf("round %d: admitted %v checks of 7 units; %d of %d units left; longest run of 503s per node %v",
			round, admitted, deposited-spent, deposited, runs)
	}
}

// waitKnown waits until node n knows key (a provisioning change reaches
// the other nodes of a fleet within the propagation bound).
func waitKnown(t *testing.T, n *proc, key string) {
	t.Helper()
	p := newPriced(n.listen, key, 0)
	p.body = `{"permission":"chat","workload":[{"op":"requests","count":0}]}`
	var a answer
	var err error
	if !await.Poll(await.Default, func() bool { a, err = p.check(); return err == nil && a.status != http.StatusUnauthorized }) {
		t.Fatalf("%s never knew the key: %+v %v", n.listen, a, err)
	}
}

// fleetRecovery bounds how long a fleet node may answer a payable check
// 503 lease-* while the units it needs come back from other nodes'
// leases, a client retrying at once. The bound in time is the simulator's
// (internal/sim, on a virtual clock: docs/FLEET.md, "The last units");
// three real daemons and PostgreSQL on a shared 2-CPU machine stretch
// every cadence of the hand-back, so here it tells a recovery, however
// slowed, from the steady state of 503s the recalls ended (which lasted
// until the leases lapsed, tens of seconds). The longest run is logged.
const fleetRecovery = 10 * time.Second

// spendOddChecks sends 7-unit checks from conns connections to addr until
// every connection is refused 402, and returns how many were admitted and
// the longest run of 503s a connection went through. A 503 lease-* is
// retried at once; a run of them longer than fleetRecovery, or any other
// answer than 200, 402 and 503 lease-*, fails t.
func spendOddChecks(t *testing.T, addr, key string, conns int) (int, time.Duration) {
	var mu sync.Mutex
	admitted, longest := 0, time.Duration(0)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			p := newPriced(addr, key, 0)
			p.body = `{"permission":"chat","workload":[{"op":"requests","count":1}]}`
			var since time.Time // the first 503 of the current run (zero: none)
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
				a, err := p.check()
				if err != nil {
					t.Errorf("%s: %v", addr, err)
					return
				}
				if a.status == http.StatusServiceUnavailable && strings.HasPrefix(a.code, "lease-") {
					if since.IsZero() {
						since = time.Now().Add(-a.took)
					}
					if run := time.Since(since); run > fleetRecovery {
						t.Errorf("%s: 7-unit checks answered 503 %s for %v: money that exists must be spendable or refused 402", addr, a.code, run)
						return
					}
					continue
				}
				if !since.IsZero() {
					mu.Lock()
					longest = max(longest, time.Since(since))
					mu.Unlock()
					since = time.Time{}
				}
				switch a.status {
				case http.StatusOK:
					mu.Lock()
					admitted++
					mu.Unlock()
				case http.StatusPaymentRequired:
					return
				default:
					t.Errorf("%s: a 7-unit check answered %d %s in %v", addr, a.status, a.code, a.took)
					return
				}
			}
			t.Errorf("%s: never refused 402", addr)
		})
	}
	wg.Wait()
	return admitted, longest
}
