//go:build linux

package node

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/internal/await"
)

// TestBoundNodeRefusesUntilOpenThenKnowsEveryKey: a bound node holds its
// port but refuses connections; state published through the plane before
// Open is on every shard when the first connection is accepted, so the
// very first request on each shard is admitted, never 401.
func TestBoundNodeRefusesUntilOpenThenKnowsEveryKey(t *testing.T) {
	const shards = 3
	tn := bindNode(t, shards)
	n := tn.Node
	addr := n.Addr()
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("dial before Open: %v, want connection refused", err)
	}
	if err := httploop.CheckFree(addr); !errors.Is(err, httploop.ErrAddrInUse) {
		t.Fatalf("a bound node's port looks free to another process: %v", err)
	}

	// Enough accounts that their messages overflow the rings into the
	// plane's backlog: Open must deliver that too.
	const accounts = 3000
	for i := range accounts {
		tn.create(t, core.AccountID("acct-"+strconv.Itoa(i)), "key-"+strconv.Itoa(i), core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1_000_000)
	}
	n.Plane().MarkReady()

	// A client connecting all along, with the key published last: each
	// connection is refused until Open, and then answered as provisioned.
	last := "key-" + strconv.Itoa(accounts-1)
	answers := make(chan int, 1)
	stop := make(chan struct{})
	var seen probeCounts
	go func() {
		answers <- probeUntil(stop, addr, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+last+
			"\r\nContent-Length: "+strconv.Itoa(len(oneRequest))+"\r\nConnection: close\r\n\r\n"+oneRequest, &seen)
	}()
	await.True(t, "the prober refused before Open", func() bool { return seen.refused.Load() > 0 })
	if err := n.Open(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// Enough connections that the kernel's SO_REUSEPORT hash has spread
	// them over every shard, each connection a new one.
	await.True(t, "the prober answered on every shard", func() bool { return seen.answered.Load() >= 16*shards })
	close(stop)
	if st := <-answers; st != 0 {
		t.Fatalf("a connection during start-up was answered %d (-1: failed otherwise than refused, -2: never answered)", st)
	}
}

// probeCounts is what probeUntil has seen so far.
type probeCounts struct{ refused, answered atomic.Int64 }

// probeUntil connects to addr again and again until stop, sending req on
// each connection and counting into seen. It returns the first status other
// than 200 it got, or 0 if every connection was refused or answered 200 and
// at least one was answered; -1 for a failure other than a refusal, -2 for
// no answer at all.
func probeUntil(stop <-chan struct{}, addr, req string, seen *probeCounts) int {
	for {
		select {
		case <-stop:
			if seen.answered.Load() == 0 {
				return -2
			}
			return 0
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, unix.ECONNREFUSED) {
			seen.refused.Add(1)
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
		seen.answered.Add(1)
	}
}
