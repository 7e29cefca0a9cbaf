package control

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tollgated/tollgated/control/funding"
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
// result, with the ledger's evidence on a grant or a refusal.
func RunCall(ctx context.Context, store ledger.Store, c funding.Call, now int64) funding.Result {
	r := funding.Result{ID: c.ID}
	var ev ledger.Evidence
	switch c.Kind {
	case funding.CallAcquire:
		r.Lease, ev, r.Err = store.Acquire(ctx, c.Account, c.Holder, c.Want, c.Need, c.TTL, now)
	case funding.CallExtend:
		r.Lease, ev, r.Err = store.Extend(ctx, c.Lease, c.Token, c.Want, c.Need, c.TTL, now)
	case funding.CallRelease:
		r.Err = store.Release(ctx, c.Lease, c.Token, c.Unspent, now)
		return r
	}
	var refusal *ledger.Refusal
	switch {
	case r.Err == nil:
		r.Evidence, r.HasEvidence = ev, true
	case errors.As(r.Err, &refusal):
		r.Evidence, r.HasEvidence = refusal.Evidence, true
	}
	return r
}

// ingest bills post-paid events and posts the outcome to done on the plane.
func (w *ledgerWorker) ingest(events []ledger.Usage, now int64, done func([]ledger.IngestResult, error)) {
	w.submit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		ctx, span := startSpan(ctx, "ledger.ingest", attrEvents.Int(len(events)))
		res, err := w.store.Ingest(ctx, events, now)
		endSpan(span, err)
		cancel()
		w.post(func() { done(res, err) })
	})
}
