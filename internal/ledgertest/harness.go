package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Opener opens the backend under test on dir. Run calls it again on the
// same dir to simulate a restart, after closing the previous store; Run
// closes every store it opens.
type Opener = func(t *testing.T, dir string) ledger.Store

// harness is one test's store and the helpers the tests share. Helpers
// fail the test on any unexpected error, so each test reads as a script.
type harness struct {
	t    *testing.T
	open Opener
	dir  string
	s    ledger.Store
	ctx  context.Context
}

func newHarness(t *testing.T, open Opener) *harness {
	h := &harness{t: t, open: open, dir: t.TempDir(), ctx: t.Context()}
	h.s = open(t, h.dir)
	t.Cleanup(func() {
		if h.s != nil {
			if err := h.s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	return h
}

// restart closes the store and opens it again on the same directory, as a
// crash and restart would (every call returned only once durable).
func (h *harness) restart() {
	h.t.Helper()
	if err := h.s.Close(); err != nil {
		h.t.Fatalf("close: %v", err)
	}
	h.s = nil
	h.s = h.open(h.t, h.dir)
}

// Times. t0 is a Tuesday noon UTC: its day ends at midnight, its week on
// Monday 16 March, its month on 1 April. They are written out here rather
// than derived from ledger.PeriodBounds, which is under test.
var (
	t0           = at(2026, 3, 10, 12)
	nextMidnight = at(2026, 3, 11, 0)
	dayStart     = at(2026, 3, 10, 0)
	weekStart    = at(2026, 3, 9, 0)
	nextMonday   = at(2026, 3, 16, 0)
	monthStart   = at(2026, 3, 1, 0)
	nextMonth    = at(2026, 4, 1, 0)
)

const (
	second = int64(time.Second)
	minute = int64(time.Minute)
	hour   = int64(time.Hour)
	day    = 24 * hour
)

func at(y int, m time.Month, d, h int) int64 {
	return time.Date(y, m, d, h, 0, 0, 0, time.UTC).UnixNano()
}

// money is an account's eight money terms, compared exactly.
type money struct {
	Deposited, Overage, AllowanceLeft, TopUpLeft, Outstanding, Settled, Loss, Expired core.CostUnits
}

func moneyOf(a ledger.Account) money {
	return money{a.Deposited, a.Overage, a.AllowanceLeft, a.TopUpLeft, a.Outstanding, a.Settled, a.Loss, a.Expired}
}

// chain creates the three-level chain most scenarios bill through: org
// (metered) → ws (unmetered: it funds nothing) → agent (metered).
func (h *harness) chain() (org, ws, agent ledger.Account) {
	h.t.Helper()
	return h.create("org", "", false), h.create("ws", "org", true), h.create("agent", "ws", false)
}

func (h *harness) create(id, parent core.AccountID, unmetered bool) ledger.Account {
	h.t.Helper()
	a, created, err := h.s.CreateAccount(h.ctx, ledger.AccountSpec{ID: id, Parent: parent, Unmetered: unmetered}, t0)
	if err != nil || !created {
		h.t.Fatalf("create %s under %q: created %v, %v", id, parent, created, err)
	}
	return a
}

func (h *harness) account(id core.AccountID) ledger.Account {
	h.t.Helper()
	a, err := h.s.Account(h.ctx, id)
	if err != nil {
		h.t.Fatalf("account %s: %v", id, err)
	}
	return a
}

// money asserts id's money exactly, and L1.
func (h *harness) money(id core.AccountID, want money) {
	h.t.Helper()
	a := h.account(id)
	if got := moneyOf(a); got != want {
		h.t.Fatalf("%s money:\n got %+v\nwant %+v", id, got, want)
	}
	if err := a.Conserved(); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) deposit(id core.AccountID, units core.CostUnits, key string) {
	h.t.Helper()
	if _, dup, err := h.s.Deposit(h.ctx, id, units, key, t0); err != nil || dup {
		h.t.Fatalf("deposit %d to %s as %q: dup %v, %v", units, id, key, dup, err)
	}
}

func (h *harness) budget(id core.AccountID, allowance core.CostUnits, p ledger.Period, now int64) ledger.Account {
	h.t.Helper()
	a, err := h.s.SetBudget(h.ctx, id, ledger.Budget{Allowance: allowance, Period: p}, now)
	if err != nil {
		h.t.Fatalf("budget %d/%d for %s: %v", allowance, p, id, err)
	}
	return a
}

func (h *harness) acquire(id core.AccountID, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence) {
	h.t.Helper()
	l, ev, err := h.s.Acquire(h.ctx, id, "node-a", want, need, ttl, now)
	if err != nil {
		h.t.Fatalf("acquire %d (need %d) for %s: %v", want, need, id, err)
	}
	return l, ev
}

func (h *harness) release(l ledger.Lease, unspent core.CostUnits, now int64) {
	h.t.Helper()
	if err := h.s.Release(h.ctx, l.ID, l.Token, unspent, now); err != nil {
		h.t.Fatalf("release %d of lease %d: %v", unspent, l.ID, err)
	}
}

// lease returns lease id as stored.
func (h *harness) lease(id uint64) ledger.Lease {
	h.t.Helper()
	all, err := h.s.Leases(h.ctx, false)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, l := range all {
		if l.ID == id {
			return l
		}
	}
	h.t.Fatalf("lease %d not found", id)
	return ledger.Lease{}
}

// ingest sends events and asserts their results.
func (h *harness) ingest(now int64, events []ledger.Usage, want ...ledger.IngestResult) {
	h.t.Helper()
	got, err := h.s.Ingest(h.ctx, events, now)
	if err != nil {
		h.t.Fatalf("ingest: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Fatalf("ingest results %v, want %v", got, want)
	}
}

// check asserts the store's own consistency check passes.
func (h *harness) check() {
	h.t.Helper()
	if err := h.s.Check(h.ctx); err != nil {
		h.t.Fatalf("check: %v", err)
	}
}

// wantErr asserts errors.Is(err, target).
func (h *harness) wantErr(what string, err, target error) {
	h.t.Helper()
	if !errors.Is(err, target) {
		h.t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

// refusal asserts err is a *ledger.Refusal with reason and account.
func (h *harness) refusal(what string, err error, reason ledger.RefusalReason, account core.AccountID) *ledger.Refusal {
	h.t.Helper()
	r, ok := errors.AsType[*ledger.Refusal](err)
	if !ok || r.Reason != reason || r.Account != account {
		h.t.Fatalf("%s: err = %v (%+v), want refusal %d by %s", what, err, r, reason, account)
	}
	return r
}

// eventID makes distinct, readable event ids.
func eventID(n uint64) (id [16]byte) {
	for i := range 8 {
		id[15-i] = byte(n >> (8 * i))
	}
	id[0] = 0xe7
	return id
}

// leaseUsage is a usage event billed against l.
func leaseUsage(n uint64, l ledger.Lease, units core.CostUnits) ledger.Usage {
	return ledger.Usage{ID: eventID(n), Account: l.Account, Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: units, OccurredAt: t0}
}
