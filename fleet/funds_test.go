package fleet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/await"
)

// announcer is a FundsSource fed by a test.
type announcer chan announcement

type announcement struct {
	ids []core.AccountID
	all bool
}

func (a announcer) FollowFunds(ctx context.Context, fn func([]core.AccountID, bool) error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case n := <-a:
			if err := fn(n.ids, n.all); err != nil {
				return err
			}
		}
	}
}

// refresher records refreshes; each one blocks until the test lets it go,
// and the first fail of them fail.
type refresher struct {
	mu      sync.Mutex
	got     [][]core.AccountID // nil entry: everything
	started chan struct{}      // a refresh took what was pending
	release chan struct{}
	fail    int
}

func (r *refresher) RefreshFunding(_ context.Context, ids []core.AccountID) error {
	return r.record(slices.Sorted(slices.Values(ids)))
}

func (r *refresher) RefreshAllFunding(context.Context) error { return r.record(nil) }

func (r *refresher) record(ids []core.AccountID) error {
	r.started <- struct{}{}
	<-r.release
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ids)
	if r.fail > 0 {
		r.fail--
		return errors.New("the ledger is away")
	}
	return nil
}

func (r *refresher) refreshes() [][]core.AccountID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// TestFundsCoalescesAnnouncements: announcements that arrive while a
// refresh runs are read together by the next one; a failed refresh is
// retried with what arrived meanwhile; "everything" is read after the
// accounts named with it, and does not absorb them: a full pass that
// keeps failing must not hold up the accounts announced.
func TestFundsCoalescesAnnouncements(t *testing.T) {
	src := make(announcer)
	r := &refresher{started: make(chan struct{}), release: make(chan struct{}), fail: 1}
	errs := make(chan error, 10)
	f := &Funds{Source: src, Refresh: r, Every: time.Millisecond, OnError: func(_ bool, err error) { errs <- err }}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	src <- announcement{ids: []core.AccountID{"a"}}
	<-r.started // the refresh of a runs; these wait for the next one
	src <- announcement{ids: []core.AccountID{"c", "b"}}
	src <- announcement{ids: []core.AccountID{"b"}}
	r.release <- struct{}{} // a: fails, so it is retried with b and c
	if err := <-errs; err == nil {
		t.Fatal("no error reported")
	}
	<-r.started // a, b, c
	src <- announcement{ids: []core.AccountID{"d"}}
	src <- announcement{all: true}
	src <- announcement{ids: []core.AccountID{"e"}}
	r.release <- struct{}{}
	<-r.started // d, e
	r.release <- struct{}{}
	<-r.started // everything
	r.release <- struct{}{}
	want := [][]core.AccountID{{"a"}, {"a", "b", "c"}, {"d", "e"}, nil}
	await.True(t, "every refresh", func() bool { return len(r.refreshes()) == len(want) })
	got := r.refreshes()
	for i := range want {
		if !slices.Equal(got[i], want[i]) || (got[i] == nil) != (want[i] == nil) {
			t.Fatalf("refreshes %v, want %v", got, want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}

// failingAll is a Refresher whose full pass always fails (a ledger too
// large for its timeout) while the accounts named refresh fine.
type failingAll struct{ all, named atomic.Int64 }

func (f *failingAll) RefreshFunding(context.Context, []core.AccountID) error {
	f.named.Add(1)
	return nil
}

func (f *failingAll) RefreshAllFunding(context.Context) error {
	f.all.Add(1)
	return context.DeadlineExceeded
}

// TestAFailingFullPassDoesNotHoldUpTheAccountsNamed: a full pass that kept
// failing used to absorb every announcement after it, so the node stopped
// following the fleet's spending altogether.
func TestAFailingFullPassDoesNotHoldUpTheAccountsNamed(t *testing.T) {
	src := make(announcer)
	r := &failingAll{}
	f := &Funds{Source: src, Refresh: r, Every: time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	src <- announcement{all: true} // what a (re)connection says
	// Each account announced while the full pass keeps failing is
	// refreshed: one at a time, so that none rides along with another.
	for i := range int64(3) {
		src <- announcement{ids: []core.AccountID{"org"}}
		await.True(t, "the account announced refreshed", func() bool { return r.named.Load() > i })
	}
	cancel()
	<-done
	if r.all.Load() == 0 {
		t.Fatal("the full pass was never tried")
	}
}
