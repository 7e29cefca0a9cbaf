package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// ExportSpool is the spool as the exporter reads it (spool.Spool).
type ExportSpool interface {
	Read(after uint64, limit int, fn func(seq uint64, payload []byte) error) (uint64, error)
	Release(upTo uint64) error
	Durable() uint64
}

// Exporter moves durable usage from the spool to the ledger in batches,
// then lets the spool drop it.
//
// A batch's data-plane usage is folded into totals — one per lease, one
// per account's elastic overage — and billed in one ledger transaction
// that also moves the node's export mark over the batch (Store.Settle).
// Exactly once comes from the mark, not from remembering every event: a
// crash between the settlement and the spool's release replays the batch,
// and the ledger, finding its mark past it, changes nothing. So the
// ledger's work grows with leases and time, not with requests. Post-paid
// events keep their reporters' ids and are ingested by id (Store.Ingest):
// a reporter's retry must be a duplicate whatever the spool did.
type Exporter struct {
	spool ExportSpool
	store ledger.Store
	node  string
	batch int
	// Changed, if set, hears of accounts whose funding changed by more than
	// their leases (post-paid usage debits balances directly).
	Changed func(ids []core.AccountID)
	// Claims, if set, are post-paid events the plane bills itself: an
	// export stops before the first one until the plane lets go of it.
	Claims *PostPaidClaims
	// OnError, if set, hears every failed export (the daemon logs it); the
	// records stay in the spool and are exported on a later pass.
	OnError func(error)
	// Floor, if set, bounds what the spool may drop: the plane's oldest
	// open commit entry must stay for a restart to find it.
	Floor func() uint64
	// Now dates settlements and post-paid events; nil reads the wall clock.
	Now func() int64

	mu          sync.Mutex // one export pass at a time
	after       uint64
	marked      bool   // the ledger's mark was read into after
	released    uint64 // highest sequence the spool was told it may drop
	lastRelease time.Time
	post        []ledger.Usage
	fold        folder

	wake chan struct{}
	// durableAt is the highest sequence the spool said is durable
	// (WakeAt); the spool may say so before its Durable shows it.
	durableAt atomic.Uint64
	stats     struct {
		events, settlements, duplicates, billed, rejected atomic.Uint64
		postAccepted, postDuplicate, postRejected         atomic.Uint64
		failures                                          atomic.Uint64
	}
}

// ExportStats counts what the exporter did.
type ExportStats struct {
	Events        uint64 // data-plane usage records folded into settlements
	Settlements   uint64 // ledger transactions that billed them
	Duplicates    uint64 // settlements the ledger had already applied (replays after a crash)
	UnitsBilled   uint64
	UnitsRejected uint64 // lease usage beyond what its lease could take
	// Post-paid events, by the ledger's verdict on each.
	PostAccepted, PostDuplicate, PostRejected uint64
	Failures                                  uint64
	Exported                                  uint64 // highest spool sequence in the ledger
}

// NewExporter exports from s to store, as node, in batches of up to batch
// records.
func NewExporter(s ExportSpool, store ledger.Store, node string, batch int) *Exporter {
	if batch <= 0 {
		batch = 256
	}
	return &Exporter{spool: s, store: store, node: node, batch: batch, wake: make(chan struct{}, 1),
		fold: newFolder()}
}

// Resume starts the export after sequence after (the spool's released
// mark): what was released before a restart is already in the ledger.
func (e *Exporter) Resume(after uint64) {
	e.mu.Lock()
	e.after = max(e.after, after)
	e.released = max(e.released, after)
	e.mu.Unlock()
}

// Wake asks for an export pass soon (the spool calls it when more usage is
// durable).
func (e *Exporter) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// WakeAt asks for an export pass for records up to seq, which the spool
// has made durable. A spool that calls it before its Durable reports seq
// (spool.Options.OnDurable does) is read again after the interval: the
// pass it wakes may find nothing new yet.
func (e *Exporter) WakeAt(seq uint64) {
	for {
		cur := e.durableAt.Load()
		if seq <= cur || e.durableAt.CompareAndSwap(cur, seq) {
			break
		}
	}
	e.Wake()
}

// SettleEvery is the exporter's cadence in a daemon: a pass — one
// settlement of everything durable, up to the batch — starts at most once
// per SettleEvery, however many requests arrive, so a node's settlements
// are at most one per SettleEvery while its traffic fits a batch a pass.
// Acknowledged usage waits in the spool (durable) for at most one interval
// and one settlement before the ledger has it; it is paid from leases
// granted beforehand, so the wait moves no money: it delays only what the
// other nodes read of the account's remaining funds.
const SettleEvery = 500 * time.Millisecond

// Run exports until stop closes: after each Wake (the spool calls it when
// more usage is durable), at most once per interval measured from the start
// of the pass before (a fixed cadence: a busy node settles every interval,
// not every interval plus a settlement's time), so a busy node bills in
// batches; and not at all while nothing new is durable, so an idle node's
// exporter does not wake. A failing ledger is retried with backoff (up to
// 5 s); nothing is dropped.
func (e *Exporter) Run(stop <-chan struct{}, interval time.Duration) {
	backoff := interval
	for {
		select {
		case <-stop:
			return
		case <-e.wake:
		}
		started := time.Now()
		var wait time.Duration
		if err := e.export(context.Background(), false); err != nil {
			backoff = min(2*backoff, 5*time.Second)
			wait = backoff
			e.Wake() // what failed is still to export
		} else {
			backoff = interval
			wait = interval - time.Since(started)
			if e.pending() {
				e.Wake()
			}
		}
		if wait <= 0 {
			continue
		}
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
	}
}

// pending reports whether durable records wait for export, or exported
// ones for their release mark.
func (e *Exporter) pending() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	upTo := e.after
	if e.Floor != nil {
		upTo = min(upTo, e.Floor())
	}
	durable := max(e.spool.Durable(), e.durableAt.Load())
	return e.after < durable || upTo > e.released
}

// releaseEvery spaces out the spool's release marks (each one is a small
// synced file write): records exported but not yet released are only
// re-exported as duplicates after a crash.
const releaseEvery = time.Second

// Export bills every record durable now, batch by batch, and releases them
// from the spool.
func (e *Exporter) Export(ctx context.Context) error { return e.export(ctx, true) }

func (e *Exporter) export(ctx context.Context, release bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.marked {
		mark, err := e.store.ExportMark(ctx, e.node)
		if err != nil {
			return err
		}
		if end := e.spool.Durable(); mark > end {
			// Records this node appends next would take numbers the
			// ledger has billed already, and be skipped.
			return fmt.Errorf("%w: the ledger billed node %q's spool up to record %d, but the spool ends at %d: it was replaced, or lost records at its end (docs/RUNBOOK.md)",
				ErrSpoolBehindMark, e.node, mark, end)
		}
		e.after, e.marked = max(e.after, mark), true
	}
	// Export what is durable now, not what becomes durable meanwhile: under
	// steady load the mark moves during every settlement, and chasing it
	// turns the exporter's interval into back-to-back ledger transactions,
	// whose syncs queue the spool's behind them (BENCHMARKS.md).
	for until := e.spool.Durable(); e.after < until; {
		n, err := e.exportBatch(ctx)
		if err != nil {
			e.stats.failures.Add(1)
			if e.OnError != nil {
				e.OnError(err)
			}
			return err
		}
		// A short batch is all the spool had published: a cadence pass
		// leaves what was noted durable since for the next pass, instead of
		// settling its few records in a transaction of their own.
		if n == 0 || !release && n < e.batch {
			break
		}
	}
	upTo := e.after
	if e.Floor != nil {
		upTo = min(upTo, e.Floor())
	}
	if upTo > e.released && (release || time.Since(e.lastRelease) >= releaseEvery) {
		if err := e.spool.Release(upTo); err != nil {
			return err
		}
		e.released, e.lastRelease = upTo, time.Now()
	}
	return nil
}

// exportBatch bills the next batch: post-paid events by id, then the
// folded data-plane totals with the mark. It returns how many records it
// moved past (0: wait, the plane is billing the next one itself).
func (e *Exporter) exportBatch(ctx context.Context) (int, error) {
	e.post = e.post[:0]
	e.fold.reset()
	from, last, n := e.after, e.after, 0
	_, err := e.spool.Read(e.after, e.batch, func(seq uint64, payload []byte) error {
		rec, err := record.Decode(payload)
		if err != nil {
			return fmt.Errorf("spool record %d: %w", seq, err)
		}
		u := LedgerUsage(&rec.Usage)
		switch {
		case rec.Kind == record.Commit, rec.Kind == record.Hole: // a journal entry or a lost record's place: not a bill
		case u.Source == ledger.UsagePostPaid:
			if e.Claims != nil && e.Claims.held(u.ID) {
				return errStop // the plane is billing it: stop before it
			}
			e.post = append(e.post, u)
		default:
			if !e.fold.add(&u) {
				return errStop // a total would overflow: the next batch bills it
			}
		}
		last, n = seq, n+1
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	if len(e.post) > 0 {
		if err := e.ingestPostPaid(ctx); err != nil {
			return 0, err
		}
	}
	st := e.fold.settlement(e.node, from, last)
	ctx, span := startSpan(ctx, "export.settle", attrEvents.Int(int(st.Events)))
	res, err := e.store.Settle(ctx, st, e.now())
	endSpan(span, err)
	if err != nil {
		return 0, err
	}
	e.stats.settlements.Add(1)
	if res.Duplicate {
		e.stats.duplicates.Add(1)
	} else {
		e.stats.events.Add(st.Events)
		e.stats.billed.Add(uint64(res.Accepted))
		e.stats.rejected.Add(uint64(res.Rejected))
	}
	e.after = last
	return n, nil
}

func (e *Exporter) now() int64 {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now().UnixNano()
}

// ErrSpoolBehindMark refuses to export from a spool that ends before what
// the ledger's export mark says this node already billed.
var ErrSpoolBehindMark = errors.New("control: the spool ends before the node's export mark")

// errStop ends a spool read early without an error.
var errStop = errors.New("stop")

// ingestPostPaid bills the batch's post-paid events by id.
func (e *Exporter) ingestPostPaid(ctx context.Context) error {
	results, err := e.store.Ingest(ctx, e.post, e.now())
	if err != nil {
		return err
	}
	var changed []core.AccountID
	for i, r := range results {
		switch r {
		case ledger.Accepted:
			e.stats.postAccepted.Add(1)
			changed = append(changed, e.post[i].Account)
		case ledger.Duplicate:
			e.stats.postDuplicate.Add(1)
		default:
			e.stats.postRejected.Add(1)
		}
	}
	if len(changed) > 0 && e.Changed != nil {
		e.Changed(changed)
	}
	return nil
}

// Stats reports the exporter's counters.
func (e *Exporter) Stats() ExportStats {
	e.mu.Lock()
	exported := e.after
	e.mu.Unlock()
	c := &e.stats
	return ExportStats{Events: c.events.Load(), Settlements: c.settlements.Load(), Duplicates: c.duplicates.Load(),
		UnitsBilled: c.billed.Load(), UnitsRejected: c.rejected.Load(), PostAccepted: c.postAccepted.Load(),
		PostDuplicate: c.postDuplicate.Load(), PostRejected: c.postRejected.Load(), Failures: c.failures.Load(),
		Exported: exported}
}

// folder sums a batch's data-plane usage per lease and per account's
// overage; its maps and slices are reused from batch to batch.
type folder struct {
	leases  map[ledger.LeaseUsage]int // the key has Units 0; the value indexes st.Leases
	overage map[ledger.LeaseUsage]int // the key is the account alone; the value indexes st.Overage
	st      ledger.Settlement
}

func newFolder() folder {
	return folder{leases: make(map[ledger.LeaseUsage]int), overage: make(map[ledger.LeaseUsage]int)}
}

func (f *folder) reset() {
	clear(f.leases)
	clear(f.overage)
	f.st = ledger.Settlement{Leases: f.st.Leases[:0], Overage: f.st.Overage[:0], History: f.st.History[:0]}
}

// add folds u into its total and keeps it for the accounts' history. It
// reports false, folding nothing, when the total would overflow: the event
// belongs in the next settlement.
func (f *folder) add(u *ledger.Usage) bool {
	totals, index := &f.st.Leases, f.leases
	key := ledger.LeaseUsage{Account: u.Account, LeaseID: u.LeaseID, Token: u.Token}
	if u.Source == ledger.UsageOverage {
		totals, index, key = &f.st.Overage, f.overage, ledger.LeaseUsage{Account: u.Account}
	}
	i, ok := index[key]
	if !ok {
		i = len(*totals)
		index[key] = i
		*totals = append(*totals, key)
	}
	sum, err := (*totals)[i].Units.Add(u.Units)
	if err != nil {
		return false
	}
	(*totals)[i].Units = sum
	f.st.Events++
	f.st.History = append(f.st.History, *u)
	return true
}

func (f *folder) settlement(node string, from, to uint64) ledger.Settlement {
	st := f.st
	st.Node, st.From, st.To = node, from, to
	return st
}
