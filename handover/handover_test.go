package handover

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// A port holds what it was sized for and refuses more; each send wakes the
// shard; a closed port fails what waits and refuses what comes; a caller
// that stops waiting learns the outcome is unknown.
func TestAPortIsBoundedWakesItsShardAndClosesCleanly(t *testing.T) {
	wakes := 0
	p, err := NewPort(3, func() { wakes++ }) // rounded up to 4
	if err != nil {
		t.Fatal(err)
	}
	var sent []*Call
	for i := range 5 {
		c := Acquire()
		err := p.Send(c)
		switch {
		case i < 4 && err != nil:
			t.Fatalf("send %d: %v", i, err)
		case i == 4 && !errors.Is(err, ErrFull):
			t.Fatalf("a send into a full port: %v, want %v", err, ErrFull)
		}
		if err == nil {
			sent = append(sent, c)
		}
	}
	if wakes != 4 {
		t.Fatalf("%d wakes for 4 sends", wakes)
	}
	var batch [2]*Call
	if n := p.Take(batch[:]); n != 2 || batch[0] != sent[0] || batch[1] != sent[1] || p.Empty() {
		t.Fatalf("took %d, out of order or all", n)
	}
	batch[0].Resp.SetStatusCode(204)
	batch[0].Done()
	if err := sent[0].Wait(time.Second); err != nil || sent[0].Resp.StatusCode() != 204 {
		t.Fatalf("answered: %v %d", err, sent[0].Resp.StatusCode())
	}
	if err := sent[1].Wait(time.Millisecond); !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("unanswered: %v, want %v", err, ErrNoAnswer)
	}
	p.Close()
	for _, c := range sent[2:] {
		if err := c.Wait(time.Second); !errors.Is(err, ErrClosed) {
			t.Fatalf("waiting at close: %v, want %v", err, ErrClosed)
		}
	}
	if err := p.Send(Acquire()); !errors.Is(err, ErrClosed) || !p.Empty() {
		t.Fatalf("a send after close: %v", err)
	}
}

// Many goroutines send through one port (its single producer side is
// serialised) while one consumer answers: every call is answered once,
// with its own answer. Run it with -race.
func TestManySendersOneShard(t *testing.T) {
	const senders, each = 8, 200
	wake := make(chan struct{}, 1)
	p, err := NewPort(senders, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go func() { // the shard
		var batch [4]*Call
		for {
			n := p.Take(batch[:])
			for _, c := range batch[:n] {
				c.Resp.SetBody(c.Req.Body())
				c.Done()
			}
			if n == 0 {
				select {
				case <-wake:
				case <-stop:
					return
				}
			}
		}
	}()
	defer close(stop)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				c := Acquire()
				want := string(rune('a'+s)) + string(rune('a'+i%26))
				c.Req.SetBodyString(want)
				if err := p.Exchange(c, 5*time.Second); err != nil {
					t.Error(err)
					return
				}
				if got := string(c.Resp.Body()); got != want {
					t.Errorf("sender %d call %d answered %q, want %q", s, i, got, want)
				}
				Release(c)
			}
		})
	}
	wg.Wait()
}
