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
// spending on every node. Each node settles its usage about every 100 ms;
// the ledger announces whose funding moved; Funds reads their evidence
// (their subtrees') again and publishes it. Announcements are coalesced:
// one refresh runs at a time, and the next starts Every after it began or
// as long after it ended as it took, whichever is later, so refreshing
// takes at most half of a node's time with the ledger however large the
// subtrees being spent from, and the reads grow with them and with time,
// not with requests, however many nodes settle.
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
	pending map[core.AccountID]bool
	// all: everything is pending besides. Kept apart from pending, so a
	// full pass that keeps failing does not hold up the accounts named.
	all  bool
	wake chan struct{}
}

// DefaultFundsEvery spaces refreshes: far below the 100 ms an admin change
// may take to reach every node, and at most 50 evidence passes a second.
const DefaultFundsEvery = 20 * time.Millisecond

// maxPendingFunds bounds the accounts waiting for a refresh; past it, the
// next refresh reads every account instead of them.
const maxPendingFunds = 4096

// Run follows the announcements until ctx ends (it returns ctx's error).
func (f *Funds) Run(ctx context.Context) error {
	f.mu.Lock()
	f.pending, f.wake = make(map[core.AccountID]bool), make(chan struct{}, 1)
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
	if all {
		f.all = true
	}
	for _, id := range ids {
		if len(f.pending) >= maxPendingFunds {
			f.all = true // covers the rest
			break
		}
		f.pending[id] = true
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default: // a refresh is already due: it reads this too
	}
}

// take returns and clears what is pending.
func (f *Funds) take() (ids []core.AccountID, all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	all, f.all = f.all, false
	for id := range f.pending {
		ids = append(ids, id)
	}
	clear(f.pending)
	return ids, all
}

func (f *Funds) refreshLoop(ctx context.Context) {
	every := f.Every
	if every <= 0 {
		every = DefaultFundsEvery
	}
	named, whole := retryMin, retryMin // back-offs of the two kinds of refresh
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
		started := time.Now()
		ids, all := f.take()
		if len(ids) > 0 {
			if err := f.Refresh.RefreshFunding(ctx, ids); err != nil {
				if ctx.Err() != nil {
					return
				}
				f.failed(false, err)
				f.note(ids, all) // again, with whatever arrives meanwhile
				if !sleep(ctx, named) {
					return
				}
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
		took := time.Since(started)
		if !sleep(ctx, max(every-took, took)) {
			return
		}
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
