package control

import (
	"sync/atomic"

	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
)

// planeLedger is the Plane's ledger: the worker runs each call and posts
// its result back to the plane's goroutine.
type planeLedger struct{ p *Plane }

func (l planeLedger) Call(c funding.Call) {
	p := l.p
	p.worker.call(c, func(r funding.Result) { p.sh.CallDone(r, p.cfg.Now()) })
}

func (l planeLedger) Ingest(in *plane.Ingest) {
	p := l.p
	p.worker.ingest(in.Events, p.cfg.Now(), func(res []plane.IngestResult, err error) { p.sh.IngestDone(in, res, err) })
}

// hookQueue bounds the hooks' work waiting for their goroutine. A funding
// refresh that finds it full waits in the shell (offered again every
// pass); a key-use report is dropped and counted (the next report says
// the same, coarse as it is).
const hookQueue = 64

// planeHooks runs the Plane's hooks — funding refreshes after post-paid
// usage, key-use reports — on one goroutine of their own, in order: they
// read and write the ledger, and a refresh publishes through the plane
// (do), so they must never run on the plane's goroutine.
type planeHooks struct {
	p        *Plane
	funding  func(ids []core.AccountID)
	keys     func(keys []plane.KeyUsed)
	announce func(plane.Announcement)
	jobs     chan func()
	quit     chan struct{}
	done     chan struct{}
	dropped  atomic.Uint64 // key-use reports and announcements that found the queue full
}

func newPlaneHooks(p *Plane, funding func([]core.AccountID), keys func([]plane.KeyUsed),
	announce func(plane.Announcement)) *planeHooks {
	return &planeHooks{p: p, funding: funding, keys: keys, announce: announce, jobs: make(chan func(), hookQueue),
		quit: make(chan struct{}), done: make(chan struct{})}
}

func (h *planeHooks) start() {
	go func() {
		defer close(h.done)
		for {
			select {
			case job := <-h.jobs:
				job()
			case <-h.quit:
				return
			}
		}
	}()
}

// stop ends the hooks' goroutine after the job it runs, if any.
func (h *planeHooks) stop() {
	close(h.quit)
	<-h.done
}

func (h *planeHooks) FundingChanged(in *plane.Ingest, ids []core.AccountID) bool {
	p := h.p
	select {
	case h.jobs <- func() {
		if h.funding != nil {
			h.funding(ids) // publishes the new evidence through do
		}
		p.post(func() { p.sh.Refreshed(in) })
	}:
		return true
	default:
		return false
	}
}

func (h *planeHooks) KeysUsed(keys []plane.KeyUsed) {
	if h.keys == nil {
		return
	}
	select {
	case h.jobs <- func() { h.keys(keys) }:
	default:
		h.dropped.Add(1)
	}
}

func (h *planeHooks) Announce(a plane.Announcement) {
	if h.announce == nil {
		return
	}
	select {
	case h.jobs <- func() { h.announce(a) }:
	default:
		h.dropped.Add(1)
	}
}
