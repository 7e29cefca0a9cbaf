package control

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// ledgerWorker runs ledger calls for the plane on its own goroutine, so the
// plane never waits for a disk. Jobs queue without bound (the plane must
// never block on the worker); results go back to the plane as commands
// (the worker may wait for the plane, never the reverse).
type ledgerWorker struct {
	store   ledger.Store
	timeout time.Duration

	mu      sync.Mutex
	queue   []queuedJob
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	inCall  int
	post    func(func())
	started bool
}

type jobKind uint8

const (
	jobAcquire jobKind = iota + 1
	jobConsolidate
	jobRelease
	jobIngest
)

type ledgerJob struct {
	kind                jobKind
	account             core.AccountID
	lease, token        uint64
	unspent, want, need core.CostUnits
	ttl, now            int64
	leaseExpires        int64 // consolidate: the old lease's expiry, to restore it if nothing happened
	events              []ledger.Usage
}

type ledgerResult struct {
	job      ledgerJob
	lease    ledger.Lease
	evidence *ledger.Evidence
	err      error
	released bool // consolidate: the old lease was released even though err != nil
	results  []ledger.IngestResult
}

type queuedJob struct {
	job ledgerJob
	cb  func(ledgerResult)
}

func newLedgerWorker(store ledger.Store, timeout time.Duration) *ledgerWorker {
	return &ledgerWorker{store: store, timeout: timeout, wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
}

func (w *ledgerWorker) start(post func(func())) {
	w.post = post
	w.started = true
	go w.run()
}

// stop finishes the queued jobs and ends the goroutine.
func (w *ledgerWorker) stop() {
	if !w.started {
		return
	}
	close(w.quit)
	<-w.done
}

func (w *ledgerWorker) submit(j ledgerJob, cb func(ledgerResult)) {
	w.mu.Lock()
	w.queue = append(w.queue, queuedJob{j, cb})
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
		for _, q := range batch {
			r := w.call(q.job)
			w.post(func() { q.cb(r) })
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
			w.mu.Lock()
			empty := len(w.queue) == 0
			w.mu.Unlock()
			if empty {
				return
			}
		}
	}
}

func (w *ledgerWorker) call(j ledgerJob) ledgerResult {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	r := ledgerResult{job: j}
	switch j.kind {
	case jobAcquire:
		r.lease, r.err = w.evidenced(&r, func() (ledger.Lease, ledger.Evidence, error) {
			return w.store.Acquire(ctx, j.account, j.want, j.need, j.ttl, j.now)
		})
	case jobConsolidate:
		r.lease, r.err = w.evidenced(&r, func() (ledger.Lease, ledger.Evidence, error) {
			return w.store.Consolidate(ctx, j.lease, j.token, j.unspent, j.want, j.need, j.ttl, j.now)
		})
		var refusal *ledger.Refusal
		r.released = r.err == nil || errors.As(r.err, &refusal)
	case jobRelease:
		r.err = w.store.Release(ctx, j.lease, j.token, j.unspent, j.now)
	case jobIngest:
		r.results, r.err = w.store.Ingest(ctx, j.events, j.now)
	}
	return r
}

// evidenced runs a granting call and keeps the evidence it carries, from a
// grant or from a refusal.
func (w *ledgerWorker) evidenced(r *ledgerResult, call func() (ledger.Lease, ledger.Evidence, error)) (ledger.Lease, error) {
	l, ev, err := call()
	var refusal *ledger.Refusal
	switch {
	case err == nil:
		r.evidence = &ev
	case errors.As(err, &refusal):
		r.evidence = &refusal.Evidence
	}
	return l, err
}
