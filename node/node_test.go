//go:build linux

package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

var secret = bytes.Repeat([]byte{3}, 32)

type testNode struct {
	*Node
	funder *control.MemoryFunder
	usage  *control.MemoryUsage
	url    string
}

func startNode(t testing.TB, shards int) *testNode {
	t.Helper()
	funder := control.NewMemoryFunder(3600e9)
	usage := &control.MemoryUsage{}
	cpus := make([]int, shards)
	n, err := Start(Config{
		Listen: "127.0.0.1:0", CPUs: cpus, Secret: secret, MaxReservations: 4096,
		Funder: funder, Usage: usage, Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown(time.Now().Add(2 * time.Second)) })
	return &testNode{Node: n, funder: funder, usage: usage, url: "http://" + n.Addr()}
}

func (tn *testNode) provision(t testing.TB, id core.AccountID, key string, limits core.Limits, deposit core.CostUnits) {
	t.Helper()
	if err := tn.funder.Deposit(id, deposit, core.ScopeAgent); err != nil {
		t.Fatal(err)
	}
	snap := &core.Snapshot{Account: id, Generation: 1, Permissions: 1, PermissionNames: []string{"chat"}, Limits: limits,
		Costs: core.CostTable{Classes: []core.OpClass{{Name: "requests", Weight: 1}, {Name: "input_tokens", Weight: 1}}}}
	if err := tn.Plane().Install(snap); err != nil {
		t.Fatal(err)
	}
	tn.Plane().Prefund(id)
	h, _ := credential.NewHasher(secret)
	d, _ := h.Digest([]byte(key))
	tn.Plane().BindKey(d, id)
	tn.Plane().MarkReady()
	time.Sleep(20 * time.Millisecond) // state reaches every shard within a loop tick
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
	funder := control.NewMemoryFunder(3600e9)
	n, err := Start(Config{Listen: "127.0.0.1:0", CPUs: []int{0, 0}, Secret: secret, Funder: funder,
		Usage: &control.MemoryUsage{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{Node: n, funder: funder, url: "http://" + n.Addr()}
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1000)
	c := &http.Client{Timeout: 5 * time.Second}
	for range 10 {
		if st, body := post(t, c, tn.url+"/v1/check", "key-acme", oneRequest); st != 200 {
			t.Fatalf("check = %d %v", st, body)
		}
	}
	c.CloseIdleConnections()
	n.Shutdown(time.Now().Add(2 * time.Second))
	bal, out := funder.Balance("acme")
	if bal != 990 || out != 0 {
		t.Fatalf("after shutdown: balance %d, outstanding %d; want 990 and 0", bal, out)
	}
}
