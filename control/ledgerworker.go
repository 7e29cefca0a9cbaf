package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/invariant"
	"github.com/tollgated/tollgated/ledger"
)

// ledgerWorker runs the plane's ledger calls on its own goroutine, so the
// plane never waits for a disk or a database. Results go back to the plane
// as commands (the worker may wait for the plane, never the reverse). Its
// queue needs no bound of its own: the funding machine keeps at most
// MaxCalls calls out, and post-paid ingests are bounded by the batches the
// shards have in flight.
type ledgerWorker struct {
	store   ledger.Store
	timeout time.Duration
	post    func(func())

	mu     sync.Mutex
	queue  []func()
	inCall int
	wake   chan struct{}
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func newLedgerWorker(store ledger.Store, timeout time.Duration, post func(func())) *ledgerWorker {
	return &ledgerWorker{store: store, timeout: timeout, post: post, wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
}

func (w *ledgerWorker) start() { go w.run() }

// stop finishes the queued jobs and ends the goroutine.
func (w *ledgerWorker) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.done
}

func (w *ledgerWorker) submit(job func()) {
	w.mu.Lock()
	w.queue = append(w.queue, job)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pending counts jobs queued or running.
func (w *ledgerWorker) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) + w.inCall
}

func (w *ledgerWorker) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.inCall = len(batch)
		w.mu.Unlock()
		for _, job := range batch {
			job()
			w.mu.Lock()
			w.inCall--
			w.mu.Unlock()
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-w.wake:
		case <-w.quit:
			if w.pending() == 0 {
				return
			}
		}
	}
}

// call runs a funding call and posts its result to done on the plane.
func (w *ledgerWorker) call(c funding.Call, done func(funding.Result)) {
	w.submit(func() {
		r := w.tracedCall(c) // run1 in a span (trace.go)
		w.post(func() { done(r) })
	})
}

func (w *ledgerWorker) run1(c funding.Call) funding.Result {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	return RunCall(ctx, w.store, c, c.Now)
}

// RunCall runs funding call c against store at now and reports its
// result as the funding machine reads it, with the ledger's evidence on a
// grant or a refusal.
func RunCall(ctx context.Context, store ledger.Store, c funding.Call, now int64) funding.Result {
	var (
		l   ledger.Lease
		ev  ledger.Evidence
		err error
	)
	switch c.Kind {
	case funding.CallAcquire:
		l, ev, err = store.Acquire(ctx, c.Account, c.Holder, c.Want, c.Need, c.TTL, now)
	case funding.CallExtend:
		l, ev, err = store.Extend(ctx, c.Lease, c.Token, c.Want, c.Need, c.TTL, now)
	case funding.CallRelease:
		err = store.Release(ctx, c.Lease, c.Token, c.Unspent, now)
	default:
		invariant.Violated(invariant.UnknownKind, fmt.Sprintf("a funding call of kind %d", c.Kind))
		return funding.Result{ID: c.ID, Outcome: funding.Invalid, Detail: "unknown call kind"}
	}
	r := funding.Result{ID: c.ID, Outcome: outcomeOf(c.Kind, err),
		Lease: funding.Grant{ID: l.ID, Token: l.Token, Granted: l.Granted, Used: l.Used, ExpiresAt: l.ExpiresAt}}
	var refusal *ledger.Refusal
	switch {
	case err == nil && c.Kind != funding.CallRelease:
		r.Evidence, r.HasEvidence = ev, true
	case errors.As(err, &refusal):
		r.Evidence, r.HasEvidence = refusal.Evidence, true
	}
	if err != nil {
		r.Detail = err.Error()
	}
	return r
}

// outcomeOf reads a ledger call's error as the funding machine's outcome.
func outcomeOf(k funding.CallKind, err error) funding.Outcome {
	var refusal *ledger.Refusal
	switch {
	case err == nil:
		return funding.OK
	case errors.As(err, &refusal) && refusal.Reason == ledger.RefusedInactive:
		return funding.RefusedInactive
	case errors.As(err, &refusal):
		return funding.Refused
	case errors.Is(err, ledger.ErrPeriodEnded):
		return funding.PeriodEnded
	case errors.Is(err, ledger.ErrInvalid):
		return funding.Invalid
	case k == funding.CallRelease && (errors.Is(err, ledger.ErrLeaseNotActive) || errors.Is(err, ledger.ErrFenced) ||
		errors.Is(err, ledger.ErrNotFound)):
		return funding.Ended
	}
	return funding.Failed
}

// ingest bills post-paid events and posts the outcome to done on the plane.
func (w *ledgerWorker) ingest(events []record.Event, now int64, done func([]plane.IngestResult, error)) {
	w.submit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		ctx, span := startSpan(ctx, "ledger.ingest", attrEvents.Int(len(events)))
		res, err := w.store.Ingest(ctx, LedgerUsages(events), now)
		endSpan(span, err)
		cancel()
		w.post(func() { done(IngestResults(res), err) })
	})
}
