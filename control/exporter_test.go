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
	"github.com/tollgated/tollgated/internal/await"
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
	ev := record.Event{ID: u.ID, Account: u.Account, Source: record.Source(u.Source), LeaseID: u.LeaseID, Token: u.Token,
		Units: u.Units, OccurredAt: u.OccurredAt}
	s.Append(record.Append(nil, &record.Record{Kind: record.Usage, Usage: ev}))
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
		Usage: record.Event{ID: [16]byte{9}, Account: "acme", Source: record.SourceLease, LeaseID: l.ID, Token: l.Token, Units: 99}}))
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
	claims.Claim([]record.Event{{ID: claimed.ID}})
	e := NewExporter(sp, store, "n1", 256)
	e.Claims = claims
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.PostAccepted != 1 || st.Exported != 1 {
		t.Fatalf("with a claim: %+v, want to stop before the claimed event", st)
	}
	claims.Unclaim([]record.Event{{ID: claimed.ID}})
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.PostAccepted != 3 || st.Exported != 3 {
		t.Fatalf("after release: %+v", st)
	}
}

// growingSpool makes a record durable during every read, as a busy node
// does while the exporter settles.
type growingSpool struct {
	*memSpool
	grow func()
}

func (s growingSpool) Read(after uint64, limit int, fn func(uint64, []byte) error) (uint64, error) {
	s.grow()
	return s.memSpool.Read(after, limit, fn)
}

// TestExportPassStopsAtTheDurableMarkItFound: one pass bills what was
// durable when it began. Chasing a mark that moves during each settlement
// turned the exporter's interval into back-to-back ledger transactions,
// each with its syncs, under steady load. (Without the bound the first
// pass also bills what arrives while it runs, in more settlements.)
func TestExportPassStopsAtTheDurableMarkItFound(t *testing.T) {
	sp, store, l := exporterFixture(t)
	for i := range 4 {
		spoolUsage(sp, leaseEvent(l, byte(i+1), 1))
	}
	id := byte(10)
	grow := growingSpool{memSpool: sp, grow: func() { id++; spoolUsage(sp, leaseEvent(l, id, 1)) }}
	e := NewExporter(grow, store, "n1", 2)
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Events != 4 || st.Settlements != 2 {
		t.Fatalf("one pass billed %d events in %d settlements, want the 4 durable at its start in 2", st.Events, st.Settlements)
	}
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Events <= 4 {
		t.Fatalf("the next pass billed nothing more (%d events)", st.Events)
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
	reads atomic.Int64 // calls of Durable
}

func (s *laggingSpool) Durable() uint64 { s.reads.Add(1); return s.shown.Load() }

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
	// The woken pass reads Durable three times — against the ledger's
	// mark, for how far to export, and to decide whether more is pending
	// — and finds nothing each time; only after the last has it decided
	// whether to sleep.
	await.True(t, "the woken pass to have looked at the spool", func() bool { return sp.reads.Load() >= 3 })
	sp.shown.Store(1)
	if !await.Poll(await.Default, func() bool { return e.Stats().Events == 1 }) {
		t.Fatalf("the record durable after its wake-up was never exported: %+v", e.Stats())
	}
}

// TestRecoveryNumbersASpoolCutAfterItWasBilledOnToTheMark: the spool's
// last records were billed, then lost (a torn tail cut on open): the spool
// ends before the ledger's mark. Recovery replays the spool first (a spool
// refuses Replay after Append), then appends empty records up to the
// mark, so the next record takes a number the mark does not cover and is
// billed; a spool that ends implausibly far before the mark is refused.
func TestRecoveryNumbersASpoolCutAfterItWasBilledOnToTheMark(t *testing.T) {
	sp, store, l := exporterFixture(t)
	ctx := context.Background()
	spoolUsage(sp, leaseEvent(l, 1, 10))
	if _, err := store.Settle(ctx, ledger.Settlement{Node: "n1", From: 0, To: 4,
		Leases: []ledger.LeaseUsage{{Account: "acme", LeaseID: l.ID, Token: l.Token, Units: 10}}}, 1); err != nil {
		t.Fatal(err)
	}
	sp.reopen()
	e := NewExporter(sp, store, "n1", 16)
	r, err := Recover(ctx, store, sp, e, "n1", 2)
	if err != nil || r.Holes != 3 || r.Mark != 4 || r.Replayed != 1 {
		t.Fatalf("recovery %+v, %v; want 3 holes", r, err)
	}
	spoolUsage(sp, leaseEvent(l, 2, 7)) // seq 5: past the mark
	if err := e.Export(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.UnitsBilled != 7 || st.Exported != 5 {
		t.Fatalf("after recovery: %+v", st)
	}

	far, store2, _ := exporterFixture(t)
	if _, err := store2.Settle(ctx, ledger.Settlement{Node: "n1", From: 0, To: MaxHoles + 1}, 1); err != nil {
		t.Fatal(err)
	}
	_, err = Recover(ctx, store2, far, NewExporter(far, store2, "n1", 16), "n1", 2)
	if !errors.Is(err, ErrSpoolBehindMark) {
		t.Fatalf("a spool %d records behind its mark: %v", MaxHoles+1, err)
	}
}

// TestRecoveryRestoresForfeitedLeasesFromAWholeSpool: a node whose lease
// was forfeited while it was away comes back with its spool: recovery
// bills the spool against the forfeit, then restores the lease — what the
// node did not spend comes back from loss — but only when the spool
// opened whole; a spool cut at open may have lost what the remainder paid
// for, and the forfeit stands for good: a later start on a whole spool
// does not restore it either.
func TestRecoveryRestoresForfeitedLeasesFromAWholeSpool(t *testing.T) {
	for _, cut := range []bool{false, true} {
		sp, store, l := exporterFixture(t)
		ctx := context.Background()
		spoolUsage(sp, leaseEvent(l, 1, 10))
		if n, err := store.Reclaim(ctx, 7200e9, 0, 10); n != 1 || err != nil {
			t.Fatalf("reclaim: %d, %v", n, err)
		}
		sp.reopen()
		r, err := RecoverWith(ctx, store, sp, NewExporter(sp, store, l.Holder, 16), RecoverOptions{Holder: l.Holder, Now: 7300e9, SpoolCut: cut})
		if err != nil {
			t.Fatal(err)
		}
		a, err := store.Account(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !cut && (r.Restored != 1 || r.RestoredUnits != 190 || a.Loss != 0 || a.Settled != 10 || a.Balance() != 990):
			t.Fatalf("whole spool: recovery %+v, account %+v", r, a)
		case cut && (r.Forfeited != 1 || r.ForfeitedUnits != 190 || r.Restored != 0 || a.Loss != 190 || a.Settled != 10):
			t.Fatalf("cut spool: recovery %+v, account %+v", r, a)
		}
		sp.reopen()
		again, err := RecoverWith(ctx, store, sp, NewExporter(sp, store, l.Holder, 16), RecoverOptions{Holder: l.Holder, Now: 7400e9})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := store.Account(ctx, "acme"); again.Restored != 0 || again.Forfeited != 0 || b.Loss != a.Loss || b.Balance() != a.Balance() {
			t.Fatalf("cut %v, then a whole start: recovery %+v, account %+v (was %+v)", cut, again, b, a)
		}
		if err := store.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecoveryDoesNotBillACommitAgainWhoseBillTheSpoolLostAfterExport: a
// commit entry stays in the spool until the commit's bill is released, so
// its bill can be exported and then lost with the disk (a tail cut after
// export, or a record quarantined as a hole) while the entry survives.
// Recovery must not take the entry for an open commit and bill its quote
// on top of the bill the ledger already has; a commit journaled after the
// last lost record the ledger billed is still open and billed at its quote.
func TestRecoveryDoesNotBillACommitAgainWhoseBillTheSpoolLostAfterExport(t *testing.T) {
	commit := func(sp *memSpool, l ledger.Lease, id byte, quote core.CostUnits) {
		sp.Append(record.Append(nil, &record.Record{Kind: record.Commit,
			Usage: record.Event{ID: [16]byte{id}, Account: l.Account, Source: record.SourceLease, LeaseID: l.ID, Token: l.Token, Units: quote}}))
	}
	settle := func(t *testing.T, store ledger.Store, l ledger.Lease, to uint64, units core.CostUnits) {
		t.Helper()
		if _, err := store.Settle(context.Background(), ledger.Settlement{Node: l.Holder, From: 0, To: to,
			Leases: []ledger.LeaseUsage{{Account: l.Account, LeaseID: l.ID, Token: l.Token, Units: units}}}, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		damage  func(sp *memSpool, store ledger.Store, l ledger.Lease)
		settled core.CostUnits
		open    core.CostUnits // billed at its quote
		// cut: the spool dropped the damage at open, and the lease's
		// remainder stays in loss (TestRecoveryCreditsNothingBackFromACutSpool);
		// a quarantined record leaves a hole and cuts nothing.
		cut bool
	}{
		{name: "tail lost after export", damage: func(sp *memSpool, store ledger.Store, l ledger.Lease) {
			commit(sp, l, 1, 40)
			spoolUsage(sp, leaseEvent(l, 1, 3)) // the commit's bill
			settle(t, store, l, 2, 3)
			sp.records = sp.records[:1] // the bill is gone; the entry, never released, is not
		}, settled: 3, cut: true},
		{name: "bill quarantined after export", damage: func(sp *memSpool, store ledger.Store, l ledger.Lease) {
			commit(sp, l, 1, 40)
			sp.Append(record.Append(nil, &record.Record{Kind: record.Hole})) // was the commit's bill
			settle(t, store, l, 2, 3)
			commit(sp, l, 2, 20)                // open: its end never came
			spoolUsage(sp, leaseEvent(l, 3, 5)) // not billed yet
		}, settled: 3 + 5 + 20, open: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp, store, l := exporterFixture(t)
			ctx := context.Background()
			tc.damage(sp, store, l)
			sp.reopen()
			r, err := RecoverWith(ctx, store, sp, NewExporter(sp, store, l.Holder, 16), RecoverOptions{Holder: l.Holder, Now: 2, SpoolCut: tc.cut})
			if err != nil {
				t.Fatal(err)
			}
			a, err := store.Account(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			var loss core.CostUnits // a cut spool's lease: its remainder
			if tc.cut {
				loss = l.Granted - tc.settled
			}
			if a.Settled != tc.settled || r.OpenUnits != tc.open || r.Unresolved != 1 || r.UnresolvedUnits != 40 || r.Leases+r.Withheld != 1 || a.Loss != loss {
				t.Fatalf("settled %d (want %d), recovery %+v, account %+v", a.Settled, tc.settled, r, a)
			}
			// A second start on the same spool bills nothing more.
			sp.reopen()
			if _, err := RecoverWith(ctx, store, sp, NewExporter(sp, store, l.Holder, 16), RecoverOptions{Holder: l.Holder, Now: 3}); err != nil {
				t.Fatal(err)
			}
			if b, _ := store.Account(ctx, "acme"); b.Settled != a.Settled || b.Balance() != a.Balance() {
				t.Fatalf("a second start: account %+v, was %+v", b, a)
			}
			if err := store.Check(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRecoveryCreditsNothingBackFromACutSpool: a damaged disk cut the
// spool's tail after its records were durable — acknowledged — and before
// the exporter billed them. Recovery cannot tell what they spent of the
// lease (a torn write and a damaged disk look alike), so it releases the
// lease with nothing returned: the remainder stays in loss, and what the
// account can spend never exceeds its deposit less the usage its clients
// were told was billed. The same lease from a spool that opened whole is
// released with exactly its remainder.
func TestRecoveryCreditsNothingBackFromACutSpool(t *testing.T) {
	for _, cut := range []bool{false, true} {
		sp, store, l := exporterFixture(t)
		ctx := context.Background()
		spoolUsage(sp, leaseEvent(l, 1, 10))
		if err := NewExporter(sp, store, l.Holder, 16).Export(ctx); err != nil {
			t.Fatal(err)
		}
		if cut {
			spoolUsage(sp, leaseEvent(l, 2, 30)) // acknowledged, then cut
			sp.records = sp.records[:1]
		}
		acknowledged := core.CostUnits(10 + 30)
		sp.reopen()
		r, err := RecoverWith(ctx, store, sp, NewExporter(sp, store, l.Holder, 16), RecoverOptions{Holder: l.Holder, Now: 2, SpoolCut: cut})
		if err != nil {
			t.Fatal(err)
		}
		a, err := store.Account(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		spendable, err := ledger.Spendable(&a)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case cut && (r.Withheld != 1 || r.WithheldUnits != 190 || r.Leases != 0 || r.Returned != 0 || a.Settled != 10 || a.Loss != 190 ||
			spendable+acknowledged > 1000):
			t.Fatalf("cut spool: recovery %+v, account %+v, spendable %d: acknowledged usage credited back", r, a, spendable)
		case !cut && (r.Leases != 1 || r.Returned != 190 || r.Withheld != 0 || a.Loss != 0 || spendable != 990):
			t.Fatalf("whole spool: recovery %+v, account %+v, spendable %d", r, a, spendable)
		}
		if err := store.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
