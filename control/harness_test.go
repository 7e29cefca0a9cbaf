package control

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

var secret = bytes.Repeat([]byte{5}, 32)

// node is a plane over n shards funded from a bolt ledger, with usage
// spooled in memory and exported, as the daemon does; each shard is driven
// by a test goroutine that polls it, and requests are served on it under
// its lock.
type node struct {
	t        testing.TB
	plane    *Plane
	shards   []*shard.Shard
	mu       []sync.Mutex // serialises a test's use of a shard with its driver
	store    *boltstore.Store
	spool    *memSpool
	syncing  *shard.SpoolSyncing
	exporter *Exporter
	prov     *Provisioner
	// now is the clock the plane and the shards read: the wall clock, or
	// a testClock the test moves by hand.
	now func() int64
}

// testClock is a clock a test moves by hand. A node built on one reads no
// other, so "past a lease's lifetime" is an Advance, not a sleep.
type testClock struct{ ns atomic.Int64 }

// newTestClock starts at the wall clock's now, so that ledger records
// written with it look ordinary.
func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) Now() int64              { return c.ns.Load() }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newNode(t *testing.T, n int, lc LeaseConfig) *node {
	t.Helper()
	return newNodeOn(t, n, lc, func() int64 { return time.Now().UnixNano() })
}

// newNodeOn is newNode with the plane and the shards reading now.
func newNodeOn(t *testing.T, n int, lc LeaseConfig, now func() int64) *node {
	t.Helper()
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nd := &node{t: t, store: store, spool: &memSpool{}, syncing: new(shard.SpoolSyncing), mu: make([]sync.Mutex, n), now: now}
	var links []Link
	for i := range n {
		inR, _ := ring.New[message.Inbound](1024)
		outR, _ := ring.New[message.Outbound](1 << 14)
		in, _ := ring.NewDoorbell(inR)
		out, _ := ring.NewDoorbell(outR)
		s, err := shard.New(shard.Config{ID: uint16(i), Secret: secret, MaxReservations: 4096, KeyUseReport: 20e6,
			Syncing: nd.syncing}, in, out)
		if err != nil {
			t.Fatal(err)
		}
		s.SetCompleter(func(uint64, func(*fasthttp.Response)) {})
		nd.shards = append(nd.shards, s)
		links = append(links, Link{In: in, Out: out, Durable: s.DurableMark()})
	}
	claims := NewPostPaidClaims()
	keysUsed := func(keys []plane.KeyUsed) { nd.prov.KeysUsed(keys) }
	p, err := New(Config{Store: store, Spool: nd.spool, Holder: "test-node", Lease: lc, Claims: claims,
		KeysUsed: keysUsed, KeyUseFlush: 20 * time.Millisecond, Syncing: nd.syncing, Now: now}, links)
	if err != nil {
		t.Fatal(err)
	}
	nd.plane = p
	nd.exporter = NewExporter(nd.spool, store, "test-node", 256)
	nd.exporter.Claims, nd.exporter.Floor = claims, p.Floor
	nd.spool.onDurable = nd.exporter.Wake
	nd.prov = NewProvisioner(p, store)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.Run(stop) }()
	go func() { defer wg.Done(); nd.exporter.Run(stop, 20*time.Millisecond) }()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A shard's loop polls between requests; a ticker stands in
			// for the requests, and lets the driver end as soon as stop
			// closes.
			tick := time.NewTicker(50 * time.Microsecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				nd.mu[i].Lock()
				nd.shards[i].Poll(nd.now())
				nd.mu[i].Unlock()
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait(); store.Close() })
	return nd
}

const testPolicy = `{"permissions":["chat"],"operations":{"requests":{"weight":1}},"limits":{"max_items":100000%s}}`

// open creates account id with units and one price-1 operation, and binds
// key to it, through the ledger and the Provisioner, as the daemon does.
// extraLimits is appended inside the policy's limits object.
func (nd *node) open(id core.AccountID, key string, units core.CostUnits, extraLimits string) {
	nd.t.Helper()
	ctx := context.Background()
	now := nd.now()
	if _, _, err := nd.store.CreateAccount(ctx, ledger.AccountSpec{ID: id}, now); err != nil {
		nd.t.Fatal(err)
	}
	if _, err := nd.store.SetPolicy(ctx, id, []byte(sprintfPolicy(extraLimits))); err != nil {
		nd.t.Fatal(err)
	}
	if units > 0 {
		if _, _, err := nd.store.Deposit(ctx, id, units, "initial", now); err != nil {
			nd.t.Fatal(err)
		}
	}
	h, _ := credential.NewHasher(secret)
	d, _ := h.Digest([]byte(key))
	if err := nd.store.AddKey(ctx, ledger.Key{ID: "k-" + string(id), Account: id, Digest: d, CreatedAt: now}); err != nil {
		nd.t.Fatal(err)
	}
	if _, _, err := nd.prov.Load(ctx); err != nil {
		nd.t.Fatal(err)
	}
	if err := nd.plane.MarkReady(); err != nil {
		nd.t.Fatal(err)
	}
}

func sprintfPolicy(extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return string(bytes.Replace([]byte(testPolicy), []byte("%s"), []byte(extra), 1))
}

// check serves one /v1/check of count requests on shard i.
func (nd *node) check(i int, key string, count int) (int, []byte) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/check")
	req.Header.Set("Authorization", "Bearer "+key)
	req.SetBodyString(`{"workload":[{"op":"requests","count":` + strconv.Itoa(count) + `}]}`)
	nd.mu[i].Lock()
	nd.shards[i].Serve(&shard.Request{Req: req, Resp: resp, Now: nd.now()})
	nd.mu[i].Unlock()
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

// waitStatus checks on shard i until the answer is want.
func (nd *node) waitStatus(i int, key string, want int, within time.Duration) {
	nd.t.Helper()
	var st int
	var body []byte
	if !await.Poll(within, func() bool { st, body = nd.check(i, key, 1); return st == want }) {
		nd.t.Fatalf("shard %d: %d %s, want %d within %v", i, st, body, want, within)
	}
}

// settle waits until the plane has no ledger call out and has run the
// answers to those it made: after the clock moved, the plane has then
// done all that the move asked of it. (A call's answer is posted as a
// command before the worker counts the call done, and commands run in
// order, so one command run after the count reached zero runs after every
// answer.)
func (nd *node) settle() {
	nd.t.Helper()
	await.True(nd.t, "the plane's ledger calls answered", func() bool {
		if nd.plane.worker.pending() != 0 {
			return false
		}
		nd.plane.do(func(*plane.Machine, int64) {})
		return nd.plane.worker.pending() == 0
	})
}

// hammer sends checks on the given shards as fast as it can for d and
// returns how many were admitted.
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

// spend checks on the given shards until a 402 (or the deadline) and
// returns how many were admitted and the last answer.
func (nd *node) spend(shards []int, key string, within time.Duration) (admitted int, last int, body []byte) {
	deadline := time.Now().Add(within)
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := false
	for _, i := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				st, b := nd.check(i, key, 1)
				mu.Lock()
				if st == 200 {
					admitted++
				}
				if st == 402 {
					last, body, done = st, b, true
				}
				stop := done
				mu.Unlock()
				if stop {
					return
				}
				if st != 200 {
					runtime.Gosched() // let the plane fund the shard
				}
			}
		}()
	}
	wg.Wait()
	return admitted, last, body
}

// stats reads the plane's counters.
func (nd *node) stats() plane.Stats { return nd.plane.Report().Stats }

func newTestHasher() (*credential.Hasher, error) { return credential.NewHasher(secret) }
