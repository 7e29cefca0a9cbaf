package control

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

func exporterFixture(t *testing.T) (*memSpool, *boltstore.Store, ledger.Lease) {
	t.Helper()
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	if _, _, err := store.CreateAccount(ctx, ledger.AccountSpec{ID: "acme"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Deposit(ctx, "acme", 1000, "d", 1); err != nil {
		t.Fatal(err)
	}
	l, _, err := store.Acquire(ctx, "acme", "test-node", 200, 0, 3600e9, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &memSpool{}, store, l
}

func spoolUsage(s *memSpool, u ledger.Usage) {
	s.Append(record.Append(nil, &record.Record{Kind: record.Usage, Usage: u}))
}

func leaseEvent(l ledger.Lease, id byte, units uint64) ledger.Usage {
	return ledger.Usage{ID: [16]byte{id}, Account: l.Account, Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: core.CostUnits(units)}
}

// TestExporterSettlesEachBatchOnce: data-plane usage is folded into one
// settlement per batch, billed once by the node's mark — a restart that
// lost the spool's release mark replays the batches as duplicates and bills
// nothing twice — and post-paid events are billed by id.
func TestExporterSettlesEachBatchOnce(t *testing.T) {
	sp, store, l := exporterFixture(t)
	for i := range 5 {
		spoolUsage(sp, leaseEvent(l, byte(i+1), 10))
	}
	spoolUsage(sp, ledger.Usage{ID: [16]byte{8}, Account: "acme", Source: ledger.UsageOverage, Units: 7})
	sp.Append(record.Append(nil, &record.Record{Kind: record.Commit,
		Usage: ledger.Usage{ID: [16]byte{9}, Account: "acme", Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: 99}}))
	spoolUsage(sp, ledger.Usage{ID: [16]byte{10}, Account: "acme", Source: ledger.UsagePostPaid, Units: 3})
	spoolUsage(sp, ledger.Usage{ID: [16]byte{11}, Account: "nobody", Source: ledger.UsagePostPaid, Units: 3})
	e := NewExporter(sp, store, "n1", 3) // several batches
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Events != 6 || st.Settlements != 3 || st.UnitsBilled != 57 || st.PostAccepted != 1 || st.PostRejected != 1 ||
		st.Exported != 9 || sp.released != 9 {
		t.Fatalf("stats %+v, released %d", st, sp.released)
	}
	if m, _ := store.ExportMark(context.Background(), "n1"); m != 9 {
		t.Fatalf("mark %d, want 9", m)
	}
	again := NewExporter(sp, store, "n1", 3)
	again.after = 0 // as if the release mark had been lost: the ledger's mark is read first
	again.marked = false
	if err := again.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := again.Stats(); st.Events != 0 || st.Settlements != 0 || st.Exported != 9 {
		t.Fatalf("re-export %+v", st)
	}
	// A replay the mark has not seen yet — the settlement committed, the
	// crash came before the exporter moved on — is a duplicate.
	replay := NewExporter(sp, store, "n1", 3)
	replay.marked = true // the mark read before the settlement
	if err := replay.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := replay.Stats(); st.Duplicates != 3 || st.UnitsBilled != 0 || st.PostDuplicate != 2 {
		t.Fatalf("replay %+v", st)
	}
	acct, _ := store.Account(context.Background(), "acme")
	if acct.Settled != 60 {
		t.Fatalf("settled %d, want 60", acct.Settled)
	}
	if err := store.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestExporterResumesAfterTheReleasedMark(t *testing.T) {
	sp, store, l := exporterFixture(t)
	for i := range 3 {
		spoolUsage(sp, leaseEvent(l, byte(i+1), 1))
	}
	e := NewExporter(sp, store, "n1", 256)
	e.Resume(2)
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Events != 1 {
		t.Fatalf("exported %+v, want only the event after the mark", st)
	}
}

func TestExporterWaitsForEventsThePlaneClaimed(t *testing.T) {
	sp, store, _ := exporterFixture(t)
	claimed := ledger.Usage{ID: [16]byte{2}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1}
	spoolUsage(sp, ledger.Usage{ID: [16]byte{1}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1})
	spoolUsage(sp, claimed)
	spoolUsage(sp, ledger.Usage{ID: [16]byte{3}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1})
	claims := NewPostPaidClaims()
	claims.Claim([]ledger.Usage{claimed})
	e := NewExporter(sp, store, "n1", 256)
	e.Claims = claims
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.PostAccepted != 1 || st.Exported != 1 {
		t.Fatalf("with a claim: %+v, want to stop before the claimed event", st)
	}
	claims.Unclaim([]ledger.Usage{claimed})
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.PostAccepted != 3 || st.Exported != 3 {
		t.Fatalf("after release: %+v", st)
	}
}

// TestExportRefusesASpoolBehindItsMark: a spool that ends before what the
// ledger says this node billed (replaced, or cut at its end) would number
// new records as already billed; the export refuses instead of skipping
// them.
func TestExportRefusesASpoolBehindItsMark(t *testing.T) {
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	if _, err := store.Settle(ctx, ledger.Settlement{Node: "n", From: 0, To: 5}, 1); err != nil {
		t.Fatal(err)
	}
	sp := &memSpool{}
	err = NewExporter(sp, store, "n", 16).Export(ctx)
	if !errors.Is(err, ErrSpoolBehindMark) {
		t.Fatalf("export over an empty spool behind mark 5: %v", err)
	}
}

// laggingSpool is a spool whose Durable shows records only when told, as
// the real spool's flusher calls OnDurable before Durable moves.
type laggingSpool struct {
	*memSpool
	shown atomic.Uint64
}

func (s *laggingSpool) Durable() uint64 { return s.shown.Load() }

// TestExporterWokenBeforeDurableShowsStillExports: the spool calls
// OnDurable (WakeAt) before its Durable reports the records; the pass that
// wake-up runs finds nothing yet. The exporter used to go back to sleep
// then, leaving an idle node's last usage unbilled until the next request.
func TestExporterWokenBeforeDurableShowsStillExports(t *testing.T) {
	mem, store, l := exporterFixture(t)
	sp := &laggingSpool{memSpool: mem}
	e := NewExporter(sp, store, "n1", 16)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); e.Run(stop, 10*time.Millisecond) }()
	defer func() { close(stop); <-done }()
	spoolUsage(mem, leaseEvent(l, 1, 10))
	e.WakeAt(1)
	time.Sleep(30 * time.Millisecond) // that pass found nothing
	sp.shown.Store(1)
	for deadline := time.Now().Add(2 * time.Second); e.Stats().Events != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the record durable after its wake-up was never exported: %+v", e.Stats())
		}
	}
}
