package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/tollgated/tollgated/core"
)

// FundsSource announces accounts whose funding another node's usage moved
// (pgstore.Store.FollowFunds): all is set when anything may have moved
// (after a reconnection, or an announcement too long to list).
type FundsSource interface {
	FollowFunds(ctx context.Context, fn func(ids []core.AccountID, all bool) error) error
}

// Refresher republishes funding evidence from the ledger
// (control.Provisioner).
type Refresher interface {
	// RefreshFunding republishes the evidence of ids and of every account
	// below them.
	RefreshFunding(ctx context.Context, ids []core.AccountID) error
	// RefreshAllFunding republishes every account's evidence.
	RefreshAllFunding(ctx context.Context) error
}

// Funds keeps a node's funding evidence — what /v1/admission decides from,
// and what the shards refuse from before asking for a lease — in step with
// spending on every node. Each node settles its usage on a cadence
// (control.SettleEvery); the ledger announces whose funding moved; Funds
// reads their evidence (their subtrees') again and publishes it.
// Announcements are coalesced by a RefreshCadence: one read at a time, each
// starting at most once per Every and no sooner after the last one ended
// than it took, so a node reads at most once per Every however many nodes
// settle and however many announcements arrive, and reading takes at most
// half of a node's time with the ledger however large the subtrees being
// spent from.
type Funds struct {
	Source  FundsSource
	Refresh Refresher
	// Every is the least time between refreshes (DefaultFundsEvery if 0).
	Every time.Duration
	// OnError, if set, hears failed refreshes (all: a full pass); what
	// failed is refreshed again (backing off from retryMin to retryMax)
	// with what arrives meanwhile.
	OnError func(all bool, err error)
	// Refreshed, if set, hears each refresh that published: how many
	// accounts it named (0 with all).
	Refreshed func(ids int, all bool)

	mu      sync.Mutex
	cadence RefreshCadence
	wake    chan struct{}
}

// DefaultFundsEvery spaces a node's reads of funding evidence: with the
// settlement cadence it bounds how stale another node's spending is here
// (docs/FLEET.md), and it is the node's ceiling on those reads — two a
// second — whatever the fleet's size.
const DefaultFundsEvery = 500 * time.Millisecond

// Run follows the announcements until ctx ends (it returns ctx's error).
func (f *Funds) Run(ctx context.Context) error {
	f.mu.Lock()
	f.cadence, f.wake = RefreshCadence{Every: int64(f.Every)}, make(chan struct{}, 1)
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.refreshLoop(ctx)
	}()
	err := f.Source.FollowFunds(ctx, func(ids []core.AccountID, all bool) error {
		f.note(ids, all)
		return nil
	})
	<-done
	return err
}

// note adds an announcement to what the next refresh reads.
func (f *Funds) note(ids []core.AccountID, all bool) {
	f.mu.Lock()
	f.cadence.Note(ids, all)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default: // a refresh is already due: it reads this too
	}
}

// take starts a refresh at now if the cadence lets one start, or says how
// long to wait (0 with nothing pending).
func (f *Funds) take(now time.Time) (ids []core.AccountID, all, ok bool, wait time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids, all, ok = f.cadence.Take(now.UnixNano())
	if !ok {
		if due, pending := f.cadence.Due(); pending {
			wait = max(time.Duration(due-now.UnixNano()), 1)
		}
	}
	return ids, all, ok, wait
}

func (f *Funds) refreshLoop(ctx context.Context) {
	named, whole := retryMin, retryMin // back-offs of the two kinds of refresh
	for {
		started := time.Now()
		ids, all, ok, wait := f.take(started)
		if !ok {
			if wait == 0 {
				select {
				case <-ctx.Done():
					return
				case <-f.wake:
				}
			} else if !sleep(ctx, wait) {
				return
			}
			continue
		}
		if len(ids) > 0 {
			if err := f.Refresh.RefreshFunding(ctx, ids); err != nil {
				if ctx.Err() != nil {
					return
				}
				f.failed(false, err)
				// Again after the back-off, with whatever arrives meanwhile.
				f.mu.Lock()
				f.cadence.Note(ids, all)
				f.cadence.Defer(time.Now().Add(named).UnixNano())
				f.mu.Unlock()
				named = min(2*named, retryMax)
				continue
			}
			named = retryMin
			f.refreshed(len(ids), false)
		}
		if all {
			if err := f.Refresh.RefreshAllFunding(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				f.failed(true, err)
				// Retried after its own back-off, without holding up the
				// accounts announced meanwhile.
				time.AfterFunc(whole, func() { f.note(nil, true) })
				whole = min(2*whole, retryMax)
			} else {
				whole = retryMin
				f.refreshed(0, true)
			}
		}
		f.mu.Lock()
		f.cadence.Done(started.UnixNano(), time.Now().UnixNano())
		f.mu.Unlock()
	}
}

func (f *Funds) failed(all bool, err error) {
	if f.OnError != nil {
		f.OnError(all, err)
	}
}

func (f *Funds) refreshed(ids int, all bool) {
	if f.Refreshed != nil {
		f.Refreshed(ids, all)
	}
}

// sleep waits d (nothing if d <= 0) and reports whether ctx is still on.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
