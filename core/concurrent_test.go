package core

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

func newConcurrentFixture(t testing.TB, stripes int, accounts int) (*Concurrent, []Principal) {
	c := NewConcurrent(stripes, Config{MaxReservations: 1 << 12})
	binds := map[Principal]AccountID{}
	var ps []Principal
	for i := range accounts {
		s := validSnapshot()
		s.Account = AccountID("acct-" + strconv.Itoa(i))
		err := c.With(s.Account, func(e *Engine) error {
			if err := e.Install(s); err != nil {
				return err
			}
			return e.GrantLease(s.Account, 1, 1<<40, t0+3600e9, 0)
		})
		if err != nil {
			t.Fatal(err)
		}
		p := Principal{Hi: uint64(i) + 1}
		binds[p] = s.Account
		ps = append(ps, p)
	}
	if err := c.BindMany(binds); err != nil {
		t.Fatal(err)
	}
	return c, ps
}

// TestCommitCancelRaceHasOneWinner races a worker's start against a
// waiter's cancel on the same tickets from two goroutines: every ticket is
// either started (and then billed) or cancelled (and charged nothing), never
// both, never neither.
func TestCommitCancelRaceHasOneWinner(t *testing.T) {
	c, ps := newConcurrentFixture(t, 4, 2)
	const rounds = 2000
	var usage [2]DiscardUsage
	var started, cancelled atomic.Int64
	for i := range rounds {
		tk, d := c.Admit(ps[i%2], 0, oneReq, &usage[i%2], t0)
		if d.Denied() {
			t.Fatal(d)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := c.Start(tk, RequestID{Lo: uint64(i)}, t0); err == nil {
				started.Add(1)
				if _, err := c.Finish(tk, 102, t0); err != nil {
					t.Error(err)
				}
			} else if !errors.Is(err, ErrCancelled) && !errors.Is(err, ErrUnknownReservation) {
				t.Error("start lost for an unexpected reason:", err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := c.Cancel(tk, t0); err == nil {
				cancelled.Add(1)
			} else if !errors.Is(err, ErrAlreadyCommitted) && !errors.Is(err, ErrUnknownReservation) {
				t.Error("cancel lost for an unexpected reason:", err)
			}
		}()
		wg.Wait()
	}
	if started.Load()+cancelled.Load() != rounds {
		t.Fatalf("%d started + %d cancelled != %d", started.Load(), cancelled.Load(), rounds)
	}
	cs := c.Counters()
	if cs.Started != uint64(started.Load()) || cs.Cancelled != uint64(cancelled.Load()) || cs.TerminalSum() != cs.Admitted {
		t.Fatalf("counters disagree: %+v", cs)
	}
	discarded := usage[0].Discarded + usage[1].Discarded
	released := usage[0].Released + usage[1].Released
	if discarded != uint64(started.Load()) || released != uint64(cancelled.Load()) {
		t.Fatalf("slots: %d recorded, %d released", discarded, released)
	}
	for i := range ps {
		c.With(AccountID("acct-"+strconv.Itoa(i)), func(e *Engine) error {
			l, _ := e.Lease(AccountID("acct-" + strconv.Itoa(i)))
			if b := l.Balance(); !b.Conserved() || b.Held != 0 {
				t.Errorf("lease after race: %+v", b)
			}
			return nil
		})
	}
}

// TestPhaseCASOneWinner hammers the phase word itself: of a commit and a
// cancel attempted at once, exactly one compare-and-swap succeeds.
func TestPhaseCASOneWinner(t *testing.T) {
	var rs resSlot
	for range 5000 {
		rs.phase = phaseReady
		var wins atomic.Int32
		var wg sync.WaitGroup
		for _, to := range []uint32{phaseCommitted, phaseClosing} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if cas(&rs.phase, phaseReady, to) {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d winners", wins.Load())
		}
	}
}

func TestConcurrentManyGoroutinesConserve(t *testing.T) {
	c, ps := newConcurrentFixture(t, 8, 16)
	var wg sync.WaitGroup
	var usage [8]DiscardUsage
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				p := ps[(g*7+i)%len(ps)]
				tk, d := c.Admit(p, 0, oneReq, &usage[g], t0)
				if d.Denied() {
					t.Error(d)
					return
				}
				if i%3 == 0 {
					c.Cancel(tk, t0)
					continue
				}
				c.Start(tk, RequestID{}, t0)
				c.Finish(tk, CostUnits(i%103), t0)
			}
		}()
	}
	wg.Wait()
	cs := c.Counters()
	if cs.Admitted != 16000 || cs.TerminalSum() != cs.Admitted || cs.Finished != cs.Started {
		t.Fatalf("counters: %+v", cs)
	}
	c.Unbind(ps[0])
	if _, d := c.Admit(ps[0], 0, oneReq, &usage[0], t0); d.Reason != DenyUnknownPrincipal {
		t.Fatalf("unbound principal admitted: %+v", d)
	}
}
