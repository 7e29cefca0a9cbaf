package control

import (
	"bytes"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

var secret = bytes.Repeat([]byte{5}, 32)

// node is a plane with n shards, each driven by a test goroutine that
// polls it and serves requests handed to it.
type node struct {
	t      *testing.T
	plane  *Plane
	shards []*shard.Shard
	funder *MemoryFunder
	usage  *MemoryUsage
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     []sync.Mutex // serialises a test's use of a shard with its driver
}

func newNode(t *testing.T, n int) *node {
	t.Helper()
	nd := &node{funder: NewMemoryFunder(3600e9), usage: &MemoryUsage{}}
	return startNode(t, nd, n, Config{Slice: 1 << 30}, nd.funder, nd.usage)
}

// startNode runs a plane over n shards funded by funder; the shards hold
// answers for durable usage when cfg has a spool.
func startNode(t *testing.T, nd *node, n int, cfg Config, funder Funder, usage UsageSink) *node {
	t.Helper()
	nd.t, nd.stop, nd.mu = t, make(chan struct{}), make([]sync.Mutex, n)
	var links []Link
	for i := range n {
		inR, _ := ring.New[shard.Inbound](1024)
		outR, _ := ring.New[shard.Outbound](1 << 14)
		in, _ := ring.NewDoorbell(inR)
		out, _ := ring.NewDoorbell(outR)
		s, err := shard.New(shard.Config{ID: uint16(i), Secret: secret, MaxReservations: 4096}, in, out)
		if err != nil {
			t.Fatal(err)
		}
		s.SetCompleter(func(uint64, func(*fasthttp.Response)) {})
		nd.shards = append(nd.shards, s)
		links = append(links, Link{In: in, Out: out})
	}
	p, err := New(cfg, links, funder, usage)
	if err != nil {
		t.Fatal(err)
	}
	nd.plane = p
	nd.wg.Add(1)
	go func() { defer nd.wg.Done(); p.Run(nd.stop) }()
	for i := range n {
		nd.wg.Add(1)
		go func() {
			defer nd.wg.Done()
			for {
				select {
				case <-nd.stop:
					return
				default:
				}
				nd.mu[i].Lock()
				nd.shards[i].Poll(time.Now().UnixNano())
				nd.mu[i].Unlock()
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	t.Cleanup(func() { close(nd.stop); nd.wg.Wait() })
	return nd
}

func (nd *node) provision(id core.AccountID, key string, limits core.Limits, deposit core.CostUnits) {
	nd.t.Helper()
	if err := nd.funder.Deposit(id, deposit, core.ScopeAgent); err != nil {
		nd.t.Fatal(err)
	}
	snap := &core.Snapshot{Account: id, Generation: 1, Permissions: 1, PermissionNames: []string{"chat"}, Limits: limits,
		Costs: core.CostTable{Classes: []core.OpClass{{Name: "requests", Weight: 1}}}}
	if err := nd.plane.Install(snap); err != nil {
		nd.t.Fatal(err)
	}
	nd.plane.Prefund(id)
	h, _ := credential.NewHasher(secret)
	d, _ := h.Digest([]byte(key))
	nd.plane.BindKey(d, id)
	nd.plane.MarkReady()
	deadline := time.Now().Add(5 * time.Second)
	for !nd.ready(id) {
		if time.Now().After(deadline) {
			nd.t.Fatal("shards never got the account")
		}
		time.Sleep(time.Millisecond)
	}
}

// ready reports whether every shard can admit for id.
func (nd *node) ready(id core.AccountID) bool {
	for i := range nd.shards {
		if st, _ := nd.check(i, "key-"+string(id), 0); st == 401 || st == 503 {
			return false
		}
	}
	return true
}

// check serves one /v1/check of count requests on shard i (count 0 is a
// probe that is refused as an empty workload once the account is there).
func (nd *node) check(i int, key string, count int) (int, []byte) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/check")
	req.Header.Set("Authorization", "Bearer "+key)
	if count == 0 {
		req.SetBodyString(`{"workload":[]}`)
	} else {
		req.SetBodyString(`{"workload":[{"op":"requests","count":` + strconv.Itoa(count) + `}]}`)
	}
	nd.mu[i].Lock()
	nd.shards[i].Serve(&shard.Request{Req: req, Resp: resp, Now: time.Now().UnixNano()})
	nd.mu[i].Unlock()
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

// hammer sends checks on the given shards as fast as it can for d and
// returns how many were admitted, and when it started.
func (nd *node) hammer(shards []int, key string, d time.Duration) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for _, i := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if st, _ := nd.check(i, key, 1); st == 200 {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

// TestRateLimitIsExactAcrossShards: with the account limited to R
// requests/s (burst B), traffic spread over every shard never gets more than
// R×t + B admitted, and the usage billed matches what was admitted.
func TestRateLimitIsExactAcrossShards(t *testing.T) {
	nd := newNode(t, 4)
	limits := core.Limits{MaxItems: 10, RequestRate: 2000, RequestBurst: 200, HoldTimeout: 10e9}
	nd.provision("acme", "key-acme", limits, 1<<40)
	start := time.Now()
	got := nd.hammer([]int{0, 1, 2, 3}, "key-acme", 1500*time.Millisecond)
	elapsed := time.Since(start).Seconds()
	bound := int64(float64(limits.RequestRate)*elapsed) + int64(limits.RequestBurst)
	if got > bound {
		t.Fatalf("admitted %d > R×t+B = %d over %.2fs across 4 shards", got, bound, elapsed)
	}
	if got < bound/4 {
		t.Fatalf("admitted only %d of a possible %d: shares never moved", got, bound)
	}
	t.Logf("admitted %d of at most %d (%.0f%%) over %.2fs", got, bound, 100*float64(got)/float64(bound), elapsed)
}

// TestOneShardCanUseNearlyTheWholeLimit: when all traffic lands on one
// shard, shares move to it and it admits at least 90% of R×t.
func TestOneShardCanUseNearlyTheWholeLimit(t *testing.T) {
	nd := newNode(t, 4)
	limits := core.Limits{MaxItems: 10, RequestRate: 2000, RequestBurst: 200, HoldTimeout: 10e9}
	nd.provision("acme", "key-acme", limits, 1<<40)
	nd.hammer([]int{2}, "key-acme", 300*time.Millisecond) // let the shares follow the traffic
	start := time.Now()
	got := nd.hammer([]int{2}, "key-acme", 1500*time.Millisecond)
	elapsed := time.Since(start).Seconds()
	floor := int64(0.9 * float64(limits.RequestRate) * elapsed)
	if got < floor {
		t.Fatalf("one shard admitted %d < 90%% of R×t = %d", got, floor)
	}
	if st := nd.plane.Stats(); st.Rebalances == 0 {
		t.Fatalf("no rebalance happened: %+v", st)
	}
}

func TestUsageReachesTheSinkAndFunderSettles(t *testing.T) {
	nd := newNode(t, 2)
	nd.provision("acme", "key-acme", core.Limits{MaxItems: 10, HoldTimeout: 10e9}, 1000)
	for range 10 {
		if st, body := nd.check(1, "key-acme", 1); st != 200 {
			t.Fatalf("check = %d %s", st, body)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(nd.usage.Events()) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10 usage events arrived", len(nd.usage.Events()))
		}
		time.Sleep(time.Millisecond)
	}
	bal, out := nd.funder.Balance("acme")
	if bal+out != 990 {
		t.Fatalf("balance %d + outstanding %d != 1000 - 10 billed", bal, out)
	}
}

func TestExhaustedBalanceAnswers402(t *testing.T) {
	nd := newNode(t, 2)
	nd.provision("acme", "key-acme", core.Limits{MaxItems: 10, HoldTimeout: 10e9}, 3)
	admitted := 0
	var last int
	var body []byte
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, b := nd.check(0, "key-acme", 1)
		if st == 200 {
			admitted++
		}
		last, body = st, b
		if st == 402 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if last != 402 || !bytes.Contains(body, []byte(`"code":"balance-exhausted"`)) {
		t.Fatalf("never answered 402: last %d %s", last, body)
	}
	if admitted > 3 {
		t.Fatalf("admitted %d with a balance of 3", admitted)
	}
}

// TestFundingFollowsTrafficToOneShard: units granted to idle shards are
// reclaimed for the busy one, so one shard can spend the whole balance, and
// never more.
func TestFundingFollowsTrafficToOneShard(t *testing.T) {
	nd := newNode(t, 3)
	nd.provision("acme", "key-acme", core.Limits{MaxItems: 10, HoldTimeout: 10e9}, 100)
	admitted := 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, body := nd.check(1, "key-acme", 1)
		if st == 200 {
			admitted++
			continue
		}
		if st == 402 {
			break
		}
		if st != 503 {
			t.Fatalf("unexpected %d %s", st, body)
		}
		time.Sleep(200 * time.Microsecond)
	}
	if admitted != 100 {
		t.Fatalf("one shard admitted %d of a balance of 100", admitted)
	}
}
