//go:build linux

package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/spool"
)

var secret = bytes.Repeat([]byte{3}, 32)

type testNode struct {
	*Node
	store *boltstore.Store
	spool *spool.Spool
	prov  *control.Provisioner
	url   string
}

// bindNode binds a node over a bolt ledger and a spool in a temporary
// directory, as the daemon does; startNode also opens it. Its answers do
// not wait for the spool: these tests are about limits and routing.
func bindNode(t testing.TB, shards int) *testNode {
	t.Helper()
	return bindNodeAck(t, shards, false)
}

// bindNodeAck is bindNode, with answers that bill usage waiting for the
// spool if durable.
func bindNodeAck(t testing.TB, shards int, durable bool) *testNode {
	t.Helper()
	return bindNodeLoop(t, shards, durable, httploop.Config{})
}

// bindNodeLoop is bindNodeAck with the shards' loop configured.
func bindNodeLoop(t testing.TB, shards int, durable bool, loop httploop.Config) *testNode {
	t.Helper()
	useProcs(t, shards)
	dir := t.TempDir()
	store, err := boltstore.Open(filepath.Join(dir, "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{store: store}
	// Only the plane appends to the spool, and it runs once plane is set
	// (StartPlane, below): the callback never sees it unset.
	var plane *control.Plane
	sp, err := spool.Open(filepath.Join(dir, "spool"), spool.Options{OnDurable: func(uint64) { plane.Kick() }})
	if err != nil {
		t.Fatal(err)
	}
	tn.spool = sp
	exporter := control.NewExporter(sp, store, "test-node", 4096)
	n, err := Bind(Config{
		Listen: "127.0.0.1:0", CPUs: make([]int, shards), Secret: secret, MaxReservations: 4096, Durable: durable,
		Loop: loop,
		Plane: control.Config{Store: store, Spool: sp, Appended: sp.Stats().Appended, Holder: "test-node",
			IsFull: func(err error) bool { return errors.Is(err, spool.ErrFull) }},
		Log: zerolog.Nop(),
		DrainUsage: func(time.Time) {
			sp.Sync()
			exporter.Export(context.Background())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	plane = n.Plane()
	exporter.Floor = n.Plane().Floor
	tn.Node, tn.url = n, "http://"+n.Addr()
	tn.prov = control.NewProvisioner(n.Plane(), store)
	n.StartPlane()
	t.Cleanup(func() {
		n.Shutdown(time.Now().Add(2 * time.Second))
		sp.Close()
		store.Close()
	})
	return tn
}

// useProcs sizes GOMAXPROCS for shards as tollgated's main does (each
// shard's locked thread holds a scheduler slot, and the plane needs one),
// until the test ends.
func useProcs(t testing.TB, shards int) {
	prev := runtime.GOMAXPROCS(0)
	if want := shards + 2; prev < want {
		runtime.GOMAXPROCS(want)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
}

func startNode(t testing.TB, shards int) *testNode {
	t.Helper()
	tn := bindNode(t, shards)
	if err := tn.Open(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return tn
}

// provision creates account id in the ledger with limits and deposit and
// binds key to it, through the provisioner, as the admin API does.
func (tn *testNode) provision(t testing.TB, id core.AccountID, key string, limits core.Limits, deposit core.CostUnits) {
	t.Helper()
	tn.create(t, id, key, limits, deposit)
	if err := tn.Plane().MarkReady(); err != nil {
		t.Fatal(err)
	}
	// Idle: every shard has popped (and so applied, on its own thread,
	// before it reads another request) what the plane sent it.
	await.True(t, "the account reaches every shard", tn.Plane().Idle)
}

func (tn *testNode) create(t testing.TB, id core.AccountID, key string, limits core.Limits, deposit core.CostUnits) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixNano()
	if _, _, err := tn.store.CreateAccount(ctx, ledger.AccountSpec{ID: id}, now); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`{"permissions":["chat"],"operations":{"requests":{"weight":1},"input_tokens":{"weight":1}},`+
		`"limits":{"max_items":%d,"request_rate":%d,"request_burst":%d,"max_concurrent":%d,"hold_timeout_ms":%d}}`,
		limits.MaxItems, limits.RequestRate, limits.RequestBurst, limits.MaxConcurrent, limits.HoldTimeout/1e6)
	if _, err := tn.store.SetPolicy(ctx, id, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	acct, _, err := tn.store.Deposit(ctx, id, deposit, "initial", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.prov.AccountChanged(acct); err != nil {
		t.Fatal(err)
	}
	h, _ := credential.NewHasher(secret)
	d, _ := h.Digest([]byte(key))
	if err := tn.store.AddKey(ctx, ledger.Key{ID: "k-" + key, Account: id, Digest: d, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	tn.prov.BindKey(d, id)
}

const oneRequest = `{"workload":[{"op":"requests","count":1}]}`

func post(t *testing.T, c *http.Client, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("not JSON: %q", b)
		}
	}
	return resp.StatusCode, m
}

func TestCheckOverRealSockets(t *testing.T) {
	tn := startNode(t, 2)
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1_000_000)
	c := &http.Client{Timeout: 5 * time.Second}
	for range 20 {
		st, body := post(t, c, tn.url+"/v1/check", "key-acme", oneRequest)
		if st != 200 || body["decision"] != "admit" {
			t.Fatalf("check = %d %v", st, body)
		}
	}
	if st, body := post(t, c, tn.url+"/v1/check", "nope", oneRequest); st != 401 || body["code"] != "unknown-principal" {
		t.Fatalf("bad key = %d %v", st, body)
	}
	resp, err := c.Get(tn.url + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// rawConn is a keep-alive connection that learns which shard serves it.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) post(t *testing.T, path, key, body string) (int, map[string]any) {
	t.Helper()
	fmt.Fprintf(rc.c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, key, len(body), body)
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// TestCommitArrivingOnAnotherShardIsForwarded admits on one shard and
// commits, finishes and cancels on connections another shard serves.
func TestCommitArrivingOnAnotherShardIsForwarded(t *testing.T) {
	tn := startNode(t, 2)
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1_000_000)
	admitOn := func(rc *rawConn) string {
		st, body := rc.post(t, "/v1/admit", "key-acme", oneRequest)
		if st != 200 {
			t.Fatalf("admit = %d %v", st, body)
		}
		return body["reservation"].(string)
	}
	// Find two connections served by different shards.
	first := dial(t, tn.Addr())
	res := admitOn(first)
	var other *rawConn
	for range 200 {
		rc := dial(t, tn.Addr())
		r := admitOn(rc)
		rc.post(t, "/v1/cancel", "key-acme", `{"reservation":"`+r+`"}`)
		if r[:4] != res[:4] {
			other = rc
			break
		}
	}
	if other == nil {
		t.Skip("the kernel put 200 connections on one shard")
	}
	if st, body := other.post(t, "/v1/commit", "key-acme", `{"reservation":"`+res+`"}`); st != 200 || body["committed"] != true {
		t.Fatalf("forwarded commit = %d %v", st, body)
	}
	if st, body := other.post(t, "/v1/finish", "key-acme", `{"reservation":"`+res+`","units":1}`); st != 200 || body["billed"] != float64(1) {
		t.Fatalf("forwarded finish = %d %v", st, body)
	}
	if st, body := other.post(t, "/v1/finish", "key-acme", `{"reservation":"`+res+`"}`); st != 404 {
		t.Fatalf("forwarded second finish = %d %v", st, body)
	}
	r2 := admitOn(first)
	if st, body := other.post(t, "/v1/cancel", "key-acme", `{"reservation":"`+r2+`"}`); st != 200 || body["cancelled"] != true {
		t.Fatalf("forwarded cancel = %d %v", st, body)
	}
}

// TestExactLimitAcrossShardsUnderLoad: many connections over every shard
// hammer one account limited to R requests/s; admissions never exceed
// R×t + burst.
func TestExactLimitAcrossShardsUnderLoad(t *testing.T) {
	tn := startNode(t, 2)
	limits := core.Limits{MaxItems: 100, RequestRate: 1000, RequestBurst: 100, HoldTimeout: 10e9}
	tn.provision(t, "acme", "key-acme", limits, 1<<40)
	var admitted, limited atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(1500 * time.Millisecond)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := dial(t, tn.Addr())
			for time.Now().Before(end) {
				st, _ := rc.post(t, "/v1/check", "key-acme", oneRequest)
				switch st {
				case 200:
					admitted.Add(1)
				case 429:
					limited.Add(1)
				default:
					t.Errorf("status %d", st)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	bound := int64(float64(limits.RequestRate)*elapsed) + int64(limits.RequestBurst)
	if admitted.Load() > bound {
		t.Fatalf("admitted %d > R×t+B = %d", admitted.Load(), bound)
	}
	if limited.Load() == 0 || admitted.Load() < bound/2 {
		t.Fatalf("load did not reach the limit: %d admitted, %d limited (bound %d)", admitted.Load(), limited.Load(), bound)
	}
	t.Logf("%d admitted of at most %d, %d limited, over %.2fs", admitted.Load(), bound, limited.Load(), elapsed)
}

func TestShutdownReturnsUnspentUnits(t *testing.T) {
	tn := bindNode(t, 2)
	if err := tn.Open(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1000)
	c := &http.Client{Timeout: 5 * time.Second}
	for range 10 {
		if st, body := post(t, c, tn.url+"/v1/check", "key-acme", oneRequest); st != 200 {
			t.Fatalf("check = %d %v", st, body)
		}
	}
	c.CloseIdleConnections()
	tn.Shutdown(time.Now().Add(2 * time.Second))
	acct, err := tn.store.Account(context.Background(), "acme")
	if err != nil || acct.Balance() != 990 || acct.Outstanding != 0 || acct.Settled != 10 || acct.Loss != 0 {
		t.Fatalf("after shutdown: %+v, %v; want balance 990, nothing outstanding or lost", acct, err)
	}
}
