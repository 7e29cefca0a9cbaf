package control

import (
	"bytes"
	"context"
	"path/filepath"
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
}

func newNode(t *testing.T, n int, lc LeaseConfig) *node {
	t.Helper()
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nd := &node{t: t, store: store, spool: &memSpool{}, syncing: new(shard.SpoolSyncing), mu: make([]sync.Mutex, n)}
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
		KeysUsed: keysUsed, KeyUseFlush: 20 * time.Millisecond, Syncing: nd.syncing}, links)
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
			for {
				select {
				case <-stop:
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
	now := time.Now().UnixNano()
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
	nd.shards[i].Serve(&shard.Request{Req: req, Resp: resp, Now: time.Now().UnixNano()})
	nd.mu[i].Unlock()
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

// waitStatus checks on shard i until the answer is want.
func (nd *node) waitStatus(i int, key string, want int, within time.Duration) {
	nd.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, body := nd.check(i, key, 1)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			nd.t.Fatalf("shard %d: %d %s, want %d within %v", i, st, body, want, within)
		}
		time.Sleep(200 * time.Microsecond)
	}
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
					time.Sleep(100 * time.Microsecond)
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
