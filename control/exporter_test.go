package control

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

func exporterFixture(t *testing.T) (*memSpool, *boltstore.Store) {
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
	return &memSpool{}, store
}

func spoolUsage(s *memSpool, u ledger.Usage) {
	s.Append(record.Append(nil, record.Usage, &u))
}

func TestExporterBillsEachEventOnceAndReleases(t *testing.T) {
	sp, store := exporterFixture(t)
	for i := range 5 {
		spoolUsage(sp, ledger.Usage{ID: [16]byte{byte(i + 1)}, Account: "acme", Source: ledger.UsagePostPaid, Units: 10})
	}
	spoolUsage(sp, ledger.Usage{ID: [16]byte{9}, Account: "nobody", Source: ledger.UsagePostPaid, Units: 10})
	e := NewExporter(sp, store, 2) // several batches
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Accepted != 5 || st.Rejected != 1 || st.Exported != 6 || sp.released != 6 {
		t.Fatalf("stats %+v, released %d", st, sp.released)
	}
	// A restart that lost the release mark re-exports: duplicates, no new bill.
	again := NewExporter(sp, store, 256)
	if err := again.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := again.Stats(); st.Duplicate != 6 || st.Accepted != 0 {
		t.Fatalf("re-export %+v", st)
	}
	acct, _ := store.Account(context.Background(), "acme")
	if acct.Settled != 50 {
		t.Fatalf("settled %d, want 50", acct.Settled)
	}
}

func TestExporterResumesAfterTheReleasedMark(t *testing.T) {
	sp, store := exporterFixture(t)
	for i := range 3 {
		spoolUsage(sp, ledger.Usage{ID: [16]byte{byte(i + 1)}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1})
	}
	e := NewExporter(sp, store, 256)
	e.Resume(2)
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Accepted != 1 {
		t.Fatalf("exported %+v, want only the event after the mark", st)
	}
}

func TestExporterWaitsForEventsThePlaneClaimed(t *testing.T) {
	sp, store := exporterFixture(t)
	claimed := ledger.Usage{ID: [16]byte{2}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1}
	spoolUsage(sp, ledger.Usage{ID: [16]byte{1}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1})
	spoolUsage(sp, claimed)
	spoolUsage(sp, ledger.Usage{ID: [16]byte{3}, Account: "acme", Source: ledger.UsagePostPaid, Units: 1})
	claims := NewPostPaidClaims()
	claims.Claim([]ledger.Usage{claimed})
	e := NewExporter(sp, store, 256)
	e.Claims = claims
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Accepted != 1 || st.Exported != 1 {
		t.Fatalf("with a claim: %+v, want to stop before the claimed event", st)
	}
	claims.Unclaim([]ledger.Usage{claimed})
	if err := e.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Accepted != 3 || st.Exported != 3 {
		t.Fatalf("after release: %+v", st)
	}
}
