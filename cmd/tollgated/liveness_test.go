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
			t.Fatalf("round %d: %v units can be spent after the 402: %v", round, avail, acct)
		}
		t.Logf("round %d: drain %v; then %d five-unit checks admitted, refused 402 %s (remaining %d) in %v",
			round, drained, admitted, last.code, last.remaining, last.took.Round(time.Microsecond))
	}
	p.stop()
}
