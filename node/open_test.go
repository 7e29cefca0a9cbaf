//go:build linux

package node

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/httploop"
)

// TestBoundNodeRefusesUntilOpenThenKnowsEveryKey: a bound node holds its
// port but refuses connections; state published through the plane before
// Open is on every shard when the first connection is accepted, so the
// very first request on each shard is admitted, never 401.
func TestBoundNodeRefusesUntilOpenThenKnowsEveryKey(t *testing.T) {
	funder := control.NewMemoryFunder(3600e9)
	const shards = 3
	n, err := Bind(Config{Listen: "127.0.0.1:0", CPUs: make([]int, shards), Secret: secret, MaxReservations: 64,
		Funder: funder, Usage: &control.MemoryUsage{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown(time.Now().Add(2 * time.Second)) })
	addr := n.Addr()
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("dial before Open: %v, want connection refused", err)
	}
	if err := httploop.CheckFree(addr); !errors.Is(err, httploop.ErrAddrInUse) {
		t.Fatalf("a bound node's port looks free to another process: %v", err)
	}

	// Enough accounts that their messages overflow the rings into the
	// plane's backlog: Open must deliver that too.
	h, _ := credential.NewHasher(secret)
	const accounts = 3000
	for i := range accounts {
		id := core.AccountID("acct-" + strconv.Itoa(i))
		if err := funder.Deposit(id, 1_000_000, core.ScopeAgent); err != nil {
			t.Fatal(err)
		}
		snap := &core.Snapshot{Account: id, Generation: 1, Permissions: 1, PermissionNames: []string{"chat"},
			Limits: core.Limits{MaxItems: 100, HoldTimeout: 10e9}, Costs: core.CostTable{Classes: []core.OpClass{{Name: "requests", Weight: 1}}}}
		if err := n.Plane().Install(snap); err != nil {
			t.Fatal(err)
		}
		d, _ := h.Digest([]byte("key-" + strconv.Itoa(i)))
		n.Plane().BindKey(d, id)
	}
	n.Plane().MarkReady()

	// A client connecting all along, with the key published last: each
	// connection is refused until Open, and then answered as provisioned.
	last := "key-" + strconv.Itoa(accounts-1)
	answers := make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		answers <- probeUntil(stop, addr, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+last+
			"\r\nContent-Length: "+strconv.Itoa(len(oneRequest))+"\r\nConnection: close\r\n\r\n"+oneRequest)
	}()
	time.Sleep(20 * time.Millisecond) // the prober is being refused
	if err := n.Open(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	if st := <-answers; st != 0 {
		t.Fatalf("a connection during start-up was answered %d (-1: failed otherwise than refused, -2: never answered)", st)
	}
}

// probeUntil connects to addr again and again until stop, sending req on
// each connection. It returns the first status other than 200 it got, or 0
// if every connection was refused or answered 200 and at least one was
// answered; -1 for a failure other than a refusal, -2 for no answer at all.
func probeUntil(stop <-chan struct{}, addr, req string) int {
	answered := 0
	for {
		select {
		case <-stop:
			if answered == 0 {
				return -2
			}
			return 0
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, unix.ECONNREFUSED) {
			continue
		}
		if err != nil {
			return -1
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			return -1
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return resp.StatusCode
		}
		answered++
	}
}
