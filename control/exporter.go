package control

import (
	"context"
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
// then lets the spool drop it. Ingest is idempotent by event id, so a crash
// between ingest and release only makes the next export report duplicates:
// every event is billed exactly once.
type Exporter struct {
	spool ExportSpool
	store ledger.Store
	batch int
	// Changed, if set, hears of accounts whose funding changed by more than
	// their leases (post-paid usage debits balances directly).
	Changed func(ids []core.AccountID)
	// Claims, if set, are post-paid events the plane bills itself: an
	// export stops before the first one until the plane lets go of it.
	Claims *PostPaidClaims

	mu          sync.Mutex // one export pass at a time
	after       uint64
	released    uint64 // highest sequence the spool was told it may drop
	lastRelease time.Time
	events      []ledger.Usage
	seqs        []uint64

	// OnError, if set, hears every failed export (the daemon logs it); the
	// records stay in the spool and are exported on a later pass.
	OnError func(error)
	// Floor, if set, bounds what the spool may drop: the plane's oldest
	// open commit entry must stay for a restart to find it.
	Floor func() uint64

	wake                                   chan struct{}
	accepted, duplicate, rejected, batches atomic.Uint64
	failures                               atomic.Uint64
}

// ExportStats counts what the exporter did.
type ExportStats struct {
	Accepted, Duplicate, Rejected, Batches, Failures uint64
	Exported                                         uint64 // highest spool sequence in the ledger
}

// NewExporter exports from s to store in batches of up to batch events.
func NewExporter(s ExportSpool, store ledger.Store, batch int) *Exporter {
	if batch <= 0 {
		batch = 256
	}
	return &Exporter{spool: s, store: store, batch: batch, wake: make(chan struct{}, 1)}
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

// Run exports until stop closes: on every wake, and every interval anyway.
// A failing ledger is retried with backoff; nothing is dropped.
func (e *Exporter) Run(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	backoff := interval
	for {
		select {
		case <-stop:
			return
		case <-e.wake:
		case <-t.C:
		}
		if err := e.export(context.Background(), false); err != nil {
			backoff = min(2*backoff, 5*time.Second)
			select {
			case <-stop:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = interval
	}
}

// releaseEvery spaces out the spool's release marks (each one is a small
// synced file write): records exported but not yet released are only
// re-exported as duplicates after a crash.
const releaseEvery = time.Second

// Export ingests every record durable now, batch by batch, and releases
// them from the spool.
func (e *Exporter) Export(ctx context.Context) error { return e.export(ctx, true) }

func (e *Exporter) export(ctx context.Context, release bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.after < e.spool.Durable() {
		n, err := e.exportBatch(ctx)
		if err != nil {
			e.failures.Add(1)
			if e.OnError != nil {
				e.OnError(err)
			}
			return err
		}
		if n == 0 {
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

func (e *Exporter) exportBatch(ctx context.Context) (int, error) {
	e.events, e.seqs = e.events[:0], e.seqs[:0]
	last, err := e.spool.Read(e.after, e.batch, func(seq uint64, payload []byte) error {
		k, u, err := record.Decode(payload)
		if err != nil {
			return fmt.Errorf("spool record %d: %w", seq, err)
		}
		if k == record.Commit {
			return nil // a journal entry, not a bill
		}
		e.events = append(e.events, u)
		e.seqs = append(e.seqs, seq)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if k := e.unclaimed(); k < len(e.events) {
		if k == 0 {
			return 0, nil // the plane is billing the next event: try again later
		}
		e.events, e.seqs, last = e.events[:k], e.seqs[:k], e.seqs[k-1]
	}
	if len(e.events) == 0 {
		e.after = max(e.after, last)
		return 0, nil
	}
	ctx, span := startSpan(ctx, "export.ingest", attrEvents.Int(len(e.events)))
	results, err := e.store.Ingest(ctx, e.events, time.Now().UnixNano())
	endSpan(span, err)
	if err != nil {
		return 0, err
	}
	var changed []core.AccountID
	for i, r := range results {
		switch r {
		case ledger.Accepted:
			e.accepted.Add(1)
			if e.events[i].Source == ledger.UsagePostPaid {
				changed = append(changed, e.events[i].Account)
			}
		case ledger.Duplicate:
			e.duplicate.Add(1)
		default:
			e.rejected.Add(1)
		}
	}
	e.batches.Add(1)
	e.after = last
	if len(changed) > 0 && e.Changed != nil {
		e.Changed(changed)
	}
	return len(e.events), nil
}

// unclaimed is how many of the batch's events come before the first one
// the plane has claimed.
func (e *Exporter) unclaimed() int {
	if e.Claims == nil {
		return len(e.events)
	}
	for i := range e.events {
		if e.events[i].Source == ledger.UsagePostPaid && e.Claims.held(e.events[i].ID) {
			return i
		}
	}
	return len(e.events)
}

// Stats reports the exporter's counters.
func (e *Exporter) Stats() ExportStats {
	e.mu.Lock()
	exported := e.after
	e.mu.Unlock()
	return ExportStats{Accepted: e.accepted.Load(), Duplicate: e.duplicate.Load(), Rejected: e.rejected.Load(),
		Batches: e.batches.Load(), Failures: e.failures.Load(), Exported: exported}
}
