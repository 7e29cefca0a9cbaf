package txn

import (
	"errors"
	"slices"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// rowsTx is a Tx over maps that records what the unit of work writes.
// Primitives these tests do not reach are the embedded nil Tx's, and
// panic.
type rowsTx struct {
	Tx
	accounts map[core.AccountID]ledger.Account
	leases   map[uint64]ledger.LeaseRecord
	puts     []string // "account <id>" or "lease <id>", in call order
}

func (x *rowsTx) LockAccounts(ids []core.AccountID) ([]ledger.Account, error) {
	return WithAncestors(ids, func(id core.AccountID) (ledger.Account, error) {
		a, ok := x.accounts[id]
		if !ok {
			return a, ledger.ErrNotFound
		}
		return a, nil
	})
}

func (x *rowsTx) LockLeases(ids []uint64) ([]ledger.LeaseRecord, error) {
	var out []ledger.LeaseRecord
	for _, id := range ids {
		if rec, ok := x.leases[id]; ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

func (x *rowsTx) PutAccount(was, now *ledger.Account) error {
	x.puts = append(x.puts, "account "+string(now.ID))
	x.accounts[now.ID] = *now
	return nil
}

func (x *rowsTx) PutLease(was, now *ledger.LeaseRecord) error {
	x.puts = append(x.puts, "lease")
	x.leases[now.ID] = *now
	return nil
}

// batchTx writes set-wise and hears announcements.
type batchTx struct {
	*rowsTx
	batches   [][]string
	announced [][]core.AccountID
}

func (x *batchTx) PutAccounts(w []AccountWrite) error {
	var ids []string
	for _, a := range w {
		ids = append(ids, string(a.Now.ID))
	}
	x.batches = append(x.batches, ids)
	return nil
}

func (x *batchTx) PutLeases(w []LeaseWrite) error { return nil }

func (x *batchTx) AnnounceFunds(ids []core.AccountID) error {
	x.announced = append(x.announced, ids)
	return nil
}

// chain is org ⊃ ws ⊃ agent, each with 100 units of top-up, and a lease of
// agent's.
func chain() *rowsTx {
	x := &rowsTx{accounts: map[core.AccountID]ledger.Account{}, leases: map[uint64]ledger.LeaseRecord{}}
	for _, a := range []ledger.AccountSpec{{ID: "org"}, {ID: "ws", Parent: "org"}, {ID: "agent", Parent: "ws"}} {
		x.accounts[a.ID] = ledger.Account{AccountSpec: a, Deposited: 100, TopUpLeft: 100, NextToken: 1}
	}
	x.leases[7] = ledger.LeaseRecord{
		Lease:   ledger.Lease{ID: 7, Account: "agent", Holder: "node-a", Token: 1, Granted: 5, State: ledger.LeaseActive, Grace: ledger.NoGrace},
		Funding: []ledger.Funding{{Account: "agent", TopUp: 5}},
	}
	return x
}

// TestFlushWritesOnlyWhatChanged: of the records a script locked, only
// those it changed are written, accounts before leases; a policy that
// goes from nil to empty is a change.
func TestFlushWritesOnlyWhatChanged(t *testing.T) {
	x := chain()
	w := newWork(x)
	if _, err := w.lockLeases([]uint64{7}); err != nil {
		t.Fatal(err)
	}
	if err := w.lockAccounts("agent"); err != nil {
		t.Fatal(err)
	}
	ws, _ := w.account("ws")
	ws.Policy = []byte{}
	rec, _ := w.lease(7)
	rec.Used = 2
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"account ws", "lease"}; !slices.Equal(x.puts, want) {
		t.Fatalf("wrote %q, want %q", x.puts, want)
	}
	if x.accounts["ws"].Policy == nil || x.leases[7].Used != 2 {
		t.Fatalf("stored %+v and %+v", x.accounts["ws"], x.leases[7])
	}
}

// TestAFieldFixedAtTheGrantCannotChange: a lease whose holder, token or
// funders changed is refused at the write-back, and nothing is written.
func TestAFieldFixedAtTheGrantCannotChange(t *testing.T) {
	for name, change := range map[string]func(*ledger.LeaseRecord){
		"holder":  func(l *ledger.LeaseRecord) { l.Holder = "node-b" },
		"token":   func(l *ledger.LeaseRecord) { l.Token++ },
		"funders": func(l *ledger.LeaseRecord) { l.Funding = append(l.Funding, ledger.Funding{Account: "ws"}) },
	} {
		x := chain()
		w := newWork(x)
		recs, err := w.lockLeases([]uint64{7})
		if err != nil {
			t.Fatal(err)
		}
		change(recs[0])
		if err := w.flush(); err == nil || len(x.puts) != 0 {
			t.Errorf("%s changed: flush %v, wrote %q", name, err, x.puts)
		}
	}
}

// TestLocksAreTakenInOrder: leases before accounts, and accounts once.
func TestLocksAreTakenInOrder(t *testing.T) {
	panics := func(name string, f func(w *work)) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		w := newWork(chain())
		if err := w.lockAccounts("org"); err != nil {
			t.Fatal(err)
		}
		f(w)
	}
	panics("accounts locked twice", func(w *work) { w.lockAccounts("ws") })
	panics("a lease locked after accounts", func(w *work) { w.lockLeases([]uint64{7}) })
}

// TestFundsAreAnnouncedForTheHighestAccountThatMoved: a backend that
// announces hears, once per transaction and set-wise, the accounts whose
// spendable funds moved, without those below another of them; a change
// that moves no funds is written but not announced.
func TestFundsAreAnnouncedForTheHighestAccountThatMoved(t *testing.T) {
	for _, c := range []struct {
		name    string
		change  func(w *work)
		written []string
		heard   []core.AccountID
	}{
		{"the whole chain", func(w *work) {
			for _, id := range []core.AccountID{"agent", "ws", "org"} {
				a, _ := w.account(id)
				a.TopUpLeft, a.Settled = 90, 10
			}
		}, []string{"agent", "org", "ws"}, []core.AccountID{"org"}},
		{"a leaf", func(w *work) {
			a, _ := w.account("agent")
			a.TopUpLeft, a.Settled = 90, 10
		}, []string{"agent"}, []core.AccountID{"agent"}},
		{"a status", func(w *work) {
			a, _ := w.account("ws")
			a.Status = core.StatusSuspended
		}, []string{"ws"}, nil},
	} {
		x := &batchTx{rowsTx: chain()}
		w := newWork(x)
		if err := w.lockAccounts("agent"); err != nil {
			t.Fatal(err)
		}
		c.change(w)
		if err := w.flush(); err != nil {
			t.Fatal(err)
		}
		if len(x.batches) != 1 || !slices.Equal(x.batches[0], c.written) || len(x.puts) != 0 {
			t.Errorf("%s: batches %q, rows %q; want one batch of %q", c.name, x.batches, x.puts, c.written)
		}
		var heard []core.AccountID
		if len(x.announced) > 0 {
			heard = x.announced[0]
		}
		if len(x.announced) > 1 || !slices.Equal(heard, c.heard) {
			t.Errorf("%s: announced %v, want %v", c.name, x.announced, c.heard)
		}
	}
}

// TestAncestryStopsAtBrokenChains: an unknown account is ErrNotFound; a
// missing ancestor or a chain deeper than three is corruption.
func TestAncestryStopsAtBrokenChains(t *testing.T) {
	accts := map[core.AccountID]*ledger.Account{
		"org": {AccountSpec: ledger.AccountSpec{ID: "org"}}, "orphan": {AccountSpec: ledger.AccountSpec{ID: "orphan", Parent: "gone"}},
		"a": {AccountSpec: ledger.AccountSpec{ID: "a", Parent: "b"}}, "b": {AccountSpec: ledger.AccountSpec{ID: "b", Parent: "c"}},
		"c": {AccountSpec: ledger.AccountSpec{ID: "c", Parent: "d"}}, "d": {AccountSpec: ledger.AccountSpec{ID: "d"}},
	}
	read := func(id core.AccountID) (*ledger.Account, error) {
		if a, ok := accts[id]; ok {
			return a, nil
		}
		return nil, ledger.ErrNotFound
	}
	if an, err := ReadAncestry("org", read); err != nil || len(an) != 1 {
		t.Fatalf("org: %v, %v", an, err)
	}
	if _, err := ReadAncestry("nobody", read); !errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrCorrupt) {
		t.Fatalf("unknown: %v", err)
	}
	for _, id := range []core.AccountID{"orphan", "a"} {
		if _, err := ReadAncestry(id, read); !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

// TestDueFirstPicksByReclaimTime: of expired leases, those past their own
// grace (or the reclaimer's, for those without one), earliest first, then
// by id, at most limit.
func TestDueFirstPicksByReclaimTime(t *testing.T) {
	lease := func(id uint64, expires, grace int64) ledger.LeaseRecord {
		return ledger.LeaseRecord{Lease: ledger.Lease{ID: id, ExpiresAt: expires, Grace: grace}}
	}
	recs := []ledger.LeaseRecord{lease(1, 10, 50), lease(2, 20, ledger.NoGrace), lease(3, 30, 0), lease(4, 5, 40), lease(5, 30, ledger.NoGrace)}
	var got []uint64
	for _, rec := range DueFirst(recs, 45, 5, 3) {
		got = append(got, rec.ID)
	}
	if want := []uint64{2, 3, 5}; !slices.Equal(got, want) { // at 25, 30, 35; 4 is due at 45 too but comes fourth
		t.Fatalf("due %v, want %v", got, want)
	}
}
