//go:build linux

package node

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/handover"
	"github.com/tollgated/tollgated/httploop"
)

// handOverCheck hands a /v1/check for key to port and waits for the answer.
func handOverCheck(t *testing.T, port *handover.Port, key string) (status int, body string, err error) {
	t.Helper()
	c := handover.Acquire()
	c.Req.Header.SetMethod(fasthttp.MethodPost)
	c.Req.SetRequestURI("/v1/check")
	c.Req.Header.Set("Authorization", "Bearer "+key)
	c.Req.Header.SetContentType("application/json")
	c.Req.SetBodyString(oneRequest)
	if err := port.Exchange(c, 5*time.Second); err != nil {
		if !errors.Is(err, handover.ErrNoAnswer) {
			handover.Release(c)
		}
		return 0, "", err
	}
	defer handover.Release(c)
	return c.Resp.StatusCode(), string(c.Resp.Body()), nil
}

// Calls handed over to a shard are decided there as requests read from a
// socket are, durable acknowledgement included. The shards' ticks are a
// minute apart, beyond the calls' patience: a call is served only because
// the sender rang the sleeping shard, and a durable answer is sent only
// because the spool's mark woke it.
func TestHandedOverCallsAreDecidedOnTheShardsThread(t *testing.T) {
	tn := bindNodeHandOver(t, 2, true, httploop.Config{Tick: time.Minute, IdleTick: time.Minute}, 4)
	if err := tn.Open(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1_000_000)
	ports := tn.HandOverPorts()
	if len(ports) != 2 {
		t.Fatalf("%d ports for 2 shards", len(ports))
	}
	for round := range 3 {
		for i, port := range ports {
			st, body, err := handOverCheck(t, port, "key-acme")
			if err != nil || st != 200 || !strings.Contains(body, `"decision":"admit"`) {
				t.Fatalf("round %d, shard %d: %d %s %v", round, i, st, body, err)
			}
			if st, body, err := handOverCheck(t, port, "key-nobody"); err != nil || st != 401 {
				t.Fatalf("round %d, shard %d, unknown key: %d %s %v", round, i, st, body, err)
			}
		}
	}
	tn.Shutdown(time.Now().Add(2 * time.Second))
	if _, _, err := handOverCheck(t, ports[0], "key-acme"); !errors.Is(err, handover.ErrClosed) {
		t.Fatalf("a call after shutdown: %v, want %v", err, handover.ErrClosed)
	}
}

// serveWith returns a desk's serve function that answers status at once,
// or postpones the answer when postpone is set (as the shard's Defer does).
func serveWith(d *desk, now *int64, postpone bool, tickets *[]uint64) func(*handover.Call) {
	return func(c *handover.Call) {
		if postpone {
			*tickets = append(*tickets, d.postpone(*now))
			if d.postpone(*now) != (*tickets)[len(*tickets)-1] {
				panic("postponing twice gave two tickets")
			}
			return
		}
		c.Resp.SetStatusCode(200)
	}
}

func newTestDesk(t *testing.T, size int) *desk {
	port, err := handover.NewPort(size, func() {})
	if err != nil {
		t.Fatal(err)
	}
	d := newDesk(port, size)
	d.timeout = int64(5 * time.Second)
	return d
}

// The desk answers a call at once or holds it under a ticket until the
// shard completes it; a ticket outliving its call is ignored; a call
// held past the loop's timeout is answered 504 answer-timeout, as the
// loop answers its own; calls beyond the desk's slots are refused
// undecided; closing fails what it holds.
func TestTheDeskHoldsPostponedCallsUnderTickets(t *testing.T) {
	d := newTestDesk(t, 2)
	var now int64 = 1e9
	var tickets []uint64
	send := func() *handover.Call {
		c := handover.Acquire()
		if err := d.port.Send(c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// At once.
	c := send()
	d.serveAll(serveWith(d, &now, false, &tickets))
	if err := c.Wait(time.Second); err != nil || c.Resp.StatusCode() != 200 || d.held() != 0 {
		t.Fatalf("answered at once: %v %d, %d held", err, c.Resp.StatusCode(), d.held())
	}
	// Postponed, then completed.
	c1, c2 := send(), send()
	d.serveAll(serveWith(d, &now, true, &tickets))
	if d.held() != 2 || !isDeskTicket(tickets[0]) || tickets[0] == tickets[1] || !d.pending(tickets[0]) {
		t.Fatalf("%d held, tickets %x", d.held(), tickets)
	}
	if err := c1.Wait(time.Millisecond); !errors.Is(err, handover.ErrNoAnswer) {
		t.Fatalf("a postponed call before its completion: %v", err)
	}
	if !d.complete(tickets[0], func(r *fasthttp.Response) { r.SetStatusCode(201) }) {
		t.Fatal("completion refused")
	}
	if err := c1.Wait(time.Second); err != nil || c1.Resp.StatusCode() != 201 || d.pending(tickets[0]) {
		t.Fatalf("completed: %v %d", err, c1.Resp.StatusCode())
	}
	// c1's slot is free again and the next postponed call takes it: c1's
	// ticket, or one forged from it, must not answer that call.
	cNext := send()
	d.serveAll(serveWith(d, &now, true, &tickets))
	next := tickets[len(tickets)-1]
	if next&^(1<<deskSeqs-1) != tickets[0]&^(1<<deskSeqs-1) {
		t.Fatalf("the next call took another slot: %x after %x", next, tickets[0])
	}
	if d.complete(tickets[0], nil) || d.complete(tickets[0]^1, nil) || d.complete(httploopTicket(), nil) || !d.pending(next) {
		t.Fatal("a stale, forged or foreign ticket completed a call")
	}
	if !d.complete(next, nil) || cNext.Wait(time.Second) != nil {
		t.Fatal("the slot's own ticket did not complete its call")
	}
	// A third call while one slot is free, a fourth with none: refused.
	c3, c4 := send(), send()
	d.serveAll(serveWith(d, &now, true, &tickets))
	if err := c4.Wait(time.Second); !errors.Is(err, handover.ErrFull) {
		t.Fatalf("a call beyond the desk's slots: %v, want refused undecided (%v)", err, handover.ErrFull)
	}
	// Past the timeout: 504 answer-timeout, and the ticket is stale.
	now += d.timeout + 1
	d.sweep(now)
	for _, c := range []*handover.Call{c2, c3} {
		if err := c.Wait(time.Second); err != nil || c.Resp.StatusCode() != 504 || !strings.Contains(string(c.Resp.Body()), "answer-timeout") {
			t.Fatalf("timed out: %v %d %s", err, c.Resp.StatusCode(), c.Resp.Body())
		}
	}
	if d.held() != 0 || d.complete(tickets[1], nil) {
		t.Fatalf("%d held after the sweep, or its ticket still completes", d.held())
	}
	// A call the shard postpones and completes before Serve returns (a
	// handler may) is answered once, and its slot is free again.
	c7 := send()
	d.serveAll(func(c *handover.Call) {
		ticket := d.postpone(now)
		d.complete(ticket, func(r *fasthttp.Response) { r.SetStatusCode(202) })
		if d.postpone(now) != ticket {
			panic("postponing again after completing gave another ticket")
		}
	})
	if err := c7.Wait(time.Second); err != nil || c7.Resp.StatusCode() != 202 || d.held() != 0 || len(d.free) != 2 {
		t.Fatalf("completed while served: %v %d, %d held, %d free", err, c7.Resp.StatusCode(), d.held(), len(d.free))
	}
	// Closing answers a held call 504 (it was served: its outcome is
	// unknown) and fails a queued one undecided.
	c5 := send()
	d.serveAll(serveWith(d, &now, true, &tickets))
	c6 := send()
	d.close()
	if err := c5.Wait(time.Second); err != nil || c5.Resp.StatusCode() != 504 {
		t.Fatalf("a held call at close: %v %d, want 504", err, c5.Resp.StatusCode())
	}
	if err := c6.Wait(time.Second); !errors.Is(err, handover.ErrClosed) {
		t.Fatalf("a queued call at close: %v, want %v", err, handover.ErrClosed)
	}
	if err := d.port.Send(handover.Acquire()); !errors.Is(err, handover.ErrClosed) {
		t.Fatalf("a send after close: %v", err)
	}
}

// The shard's loop sleeps only when its port is empty too: a call sent
// after the inbox was found empty, before the loop blocks, is seen.
func TestTheLoopDoesNotSleepOnAWaitingCall(t *testing.T) {
	tn := bindNodeHandOver(t, 1, false, httploop.Config{}, 2)
	w := tn.runners[0].loopConfig().Wake // no loop runs yet: this goroutine may consume
	if !w.BeginSleep() {
		t.Fatal("an idle shard may not sleep")
	}
	w.EndSleep()
	c := handover.Acquire()
	if err := tn.HandOverPorts()[0].Send(c); err != nil {
		t.Fatal(err)
	}
	if w.BeginSleep() {
		t.Fatal("the shard may sleep with a call in its port")
	}
	w.EndSleep()
}

// httploopTicket is a ticket of the shard's loop: the desk never takes it.
func httploopTicket() uint64 { return uint64(1)<<40 | 1 }
