package core

import (
	"errors"
	"testing"
	"unsafe"
)

const t0 = int64(1_700_000_000e9)

var (
	alice = Principal{Hi: 1, Lo: 1}
	bob   = Principal{Hi: 2, Lo: 2}
)

// recorder is a UsageSlot that keeps what it was told, to check that every
// admitted request ends in exactly one Record or Release.
type recorder struct {
	events   []UsageEvent
	released int
}

func (r *recorder) Record(ev *UsageEvent) { r.events = append(r.events, *ev) }
func (r *recorder) Release()              { r.released++ }

// fixture is one engine with account "acme" (principals alice and bob) funded
// by a lease of 1,000,000 units.
type fixture struct {
	t     *testing.T
	e     *Engine
	snap  *Snapshot
	usage *recorder
}

func newFixture(t *testing.T, mutate func(*Snapshot, *Config)) *fixture {
	t.Helper()
	s := validSnapshot()
	cfg := Config{MaxReservations: 64}
	if mutate != nil {
		mutate(s, &cfg)
	}
	e := NewEngine(cfg)
	if err := e.Install(s); err != nil {
		t.Fatal(err)
	}
	must(t, e.Bind(alice, "acme"))
	must(t, e.Bind(bob, "acme"))
	must(t, e.GrantLease("acme", 1, 1_000_000, t0+3600e9, 1000))
	return &fixture{t: t, e: e, snap: s, usage: &recorder{}}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// admit runs begin and admit for alice with work.
func (f *fixture) admit(work []WorkItem, now int64) (Reservation, Denial) {
	ctx, reason := f.e.Begin(alice, 0b1, now)
	if reason.Denied() {
		return Reservation{}, Denial{Reason: reason}
	}
	return f.e.Admit(&ctx, work, f.usage, now)
}

// start runs begin, admit, capacity and commit, failing the test on refusal.
func (f *fixture) start(work []WorkItem, now int64) Reservation {
	f.t.Helper()
	r, d := f.admit(work, now)
	if d.Denied() {
		f.t.Fatalf("admit refused: %+v", d)
	}
	if err := f.e.AcquireCapacity(r); err != nil {
		f.t.Fatalf("capacity: %v", err)
	}
	if err := f.e.Commit(r, RequestID{Lo: 7}, now); err != nil {
		f.t.Fatalf("commit: %v", err)
	}
	return r
}

// admitAndCancel admits n requests for alice and cancels each, failing the
// test on a refusal: it spends rate tokens without holding anything.
func (f *fixture) admitAndCancel(n int, now int64) {
	f.t.Helper()
	for range n {
		r, d := f.admit(oneReq, now)
		if d.Denied() {
			f.t.Fatal(d)
		}
		f.e.Cancel(r, now)
	}
}

func (f *fixture) lease() LeaseBalance {
	l, err := f.e.Lease("acme")
	must(f.t, err)
	return l.Balance()
}

// conserved asserts the lease account balances and every outcome is counted.
func (f *fixture) conserved() {
	f.t.Helper()
	if b := f.lease(); !b.Conserved() {
		f.t.Fatalf("lease not conserved: %+v", b)
	}
	c := f.e.Counters()
	notStarted, started := f.e.Outstanding()
	if c.TerminalSum()+uint64(notStarted) != c.Admitted || c.Finished+c.Lapsed+uint64(started) != c.Started {
		f.t.Fatalf("partition broken: %+v outstanding %d/%d", c, notStarted, started)
	}
}

var oneReq = []WorkItem{{Op: 0, Count: 100}} // quote 102

func TestFullPathBillsOnce(t *testing.T) {
	f := newFixture(t, nil)
	r := f.start(oneReq, t0)
	if got := f.lease(); got.Held != 102 || got.Available != 1_000_000-102 {
		t.Fatalf("after commit: %+v", got)
	}
	billed, err := f.e.Finish(r, 90, t0+5e6)
	if err != nil || billed != 90 {
		t.Fatalf("Finish = %d, %v", billed, err)
	}
	if len(f.usage.events) != 1 {
		t.Fatalf("%d events, want 1", len(f.usage.events))
	}
	ev := f.usage.events[0]
	if ev.Units != 90 || ev.Quote != 102 || ev.Account() != "acme" || ev.FencingToken != 1 ||
		ev.Source != SourceLease || ev.RequestID != (RequestID{Lo: 7}) || ev.Generation() != 1 || ev.Lapsed {
		t.Fatalf("event = %+v", ev)
	}
	if got := f.lease(); got.Held != 0 || got.Billed != 90 || got.Available != 1_000_000-90 {
		t.Fatalf("after finish: %+v", got)
	}
	if _, err := f.e.Finish(r, 90, t0); !errors.Is(err, ErrUnknownReservation) {
		t.Fatalf("second Finish: %v", err)
	}
	if len(f.usage.events) != 1 {
		t.Fatal("second finish emitted an event")
	}
	f.conserved()
}

func TestFinishAboveQuoteRefused(t *testing.T) {
	f := newFixture(t, nil)
	r := f.start(oneReq, t0)
	if _, err := f.e.Finish(r, 103, t0); !errors.Is(err, ErrBilledAboveQuote) {
		t.Fatalf("billing above quote: %v", err)
	}
	if _, err := f.e.Finish(r, 102, t0); err != nil {
		t.Fatalf("finish at quote after refusal: %v", err)
	}
	f.conserved()
}

func TestCancelBeforeCommitChargesNothing(t *testing.T) {
	f := newFixture(t, nil)
	r, d := f.admit(oneReq, t0)
	if d.Denied() {
		t.Fatal(d)
	}
	must(t, f.e.Cancel(r, t0))
	if got := f.lease(); got.Held != 0 || got.Billed != 0 || got.Available != 1_000_000 {
		t.Fatalf("after cancel: %+v", got)
	}
	if len(f.usage.events) != 0 || f.usage.released != 1 {
		t.Fatalf("usage: %d events, %d released", len(f.usage.events), f.usage.released)
	}
	if err := f.e.Commit(r, RequestID{}, t0); !errors.Is(err, ErrUnknownReservation) {
		t.Fatalf("commit after cancel: %v", err)
	}
	f.conserved()
}

func TestCancelAfterCommitIsRefused(t *testing.T) {
	f := newFixture(t, nil)
	r := f.start(oneReq, t0)
	if err := f.e.Cancel(r, t0); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("late cancel: %v", err)
	}
	if got := f.lease(); got.Held != 102 {
		t.Fatalf("late cancel changed funding: %+v", got)
	}
}

func TestStagesOutOfOrder(t *testing.T) {
	f := newFixture(t, nil)
	r, _ := f.admit(oneReq, t0)
	if err := f.e.Commit(r, RequestID{}, t0); !errors.Is(err, ErrNotReady) {
		t.Fatalf("commit before capacity: %v", err)
	}
	if _, err := f.e.Finish(r, 1, t0); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("finish before commit: %v", err)
	}
	if err := f.e.Commit(Reservation{idx: 999}, RequestID{}, t0); !errors.Is(err, ErrUnknownReservation) {
		t.Fatalf("commit of a made-up handle: %v", err)
	}
}

func TestStaleHandleNeverReachesTheNextOccupant(t *testing.T) {
	f := newFixture(t, func(_ *Snapshot, c *Config) { c.MaxReservations = 1 })
	old, _ := f.admit(oneReq, t0)
	must(t, f.e.Cancel(old, t0))
	fresh, d := f.admit(oneReq, t0)
	if d.Denied() || fresh.idx != old.idx {
		t.Fatalf("slot not reused: %+v %+v", fresh, d)
	}
	if err := f.e.Cancel(old, t0); !errors.Is(err, ErrUnknownReservation) {
		t.Fatalf("stale handle cancelled the new reservation: %v", err)
	}
	if ReservationFromID(fresh.ID()) != fresh {
		t.Fatal("ID round trip")
	}
}

func TestBeginRefusals(t *testing.T) {
	f := newFixture(t, nil)
	if _, d := f.e.Begin(Principal{Hi: 9}, 0, t0); d != DenyUnknownPrincipal {
		t.Fatalf("unknown: %+v", d)
	}
	if _, d := f.e.Begin(alice, 0b100, t0); d != DenyMissingPermission {
		t.Fatalf("permission: %+v", d)
	}
	for st, want := range map[Status]DenyReason{StatusSuspended: DenyAccountSuspended, StatusClosed: DenyAccountClosed} {
		g := newFixture(t, func(s *Snapshot, _ *Config) { s.Status = st })
		if _, d := g.e.Begin(alice, 0, t0); d != want {
			t.Fatalf("%s: %+v", st, d)
		}
	}
	g := newFixture(t, func(s *Snapshot, _ *Config) { s.ValidUntil = t0 + 10 })
	if _, d := g.e.Begin(alice, 0, t0+10); d != DenySnapshotExpired {
		t.Fatalf("expired: %+v", d)
	}
	f.e.Unbind(alice)
	if _, d := f.e.Begin(alice, 0, t0); d != DenyUnknownPrincipal {
		t.Fatalf("revoked: %+v", d)
	}
	c := f.e.Counters()
	if c.Denials[DenyUnknownPrincipal] != 2 || c.Denials[DenyMissingPermission] != 1 {
		t.Fatalf("denials not counted: %v", c.Denials)
	}
}

func TestAdmitShapeRefusals(t *testing.T) {
	f := newFixture(t, nil)
	cases := []struct {
		work []WorkItem
		want DenyReason
	}{
		{nil, DenyEmptyWorkload},
		{[]WorkItem{{Op: 9, Count: 1}}, DenyUnpricedOperation},
		{[]WorkItem{{Op: 0, Count: 101}}, DenyRequestTooLarge},
		{[]WorkItem{{Op: 3, Count: 1}}, DenyMissingPermission}, // class needs bit 5
		{[]WorkItem{{Op: 3, Count: 1 << 62}}, DenyCostOverflow},
	}
	for _, c := range cases {
		if _, d := f.admit(c.work, t0); d.Reason != c.want {
			t.Errorf("%v: %+v, want %s", c.work, d, c.want)
		}
	}
	if f.usage.released != len(cases) {
		t.Fatalf("refused admits released %d slots, want %d", f.usage.released, len(cases))
	}
	if got := f.lease(); got.Available != 1_000_000 {
		t.Fatalf("a refusal charged: %+v", got)
	}
}

func TestPinnedGenerationSurvivesRepublication(t *testing.T) {
	f := newFixture(t, nil)
	ctx, _ := f.e.Begin(alice, 0b1, t0)
	next := *f.snap
	next.Generation = 2
	next.Status = StatusSuspended
	next.Limits.MaxItems = 10
	must(t, f.e.Install(&next))
	if ctx.Generation() != 1 || ctx.Limits().MaxItems != 100 {
		t.Fatalf("context moved: gen %d limits %+v", ctx.Generation(), ctx.Limits())
	}
	// Judged by the pinned snapshot: 50 items is fine under generation 1.
	r, d := f.e.Admit(&ctx, []WorkItem{{Op: 0, Count: 50}}, f.usage, t0)
	if d.Denied() {
		t.Fatalf("pinned admit refused: %+v", d)
	}
	if _, d := f.e.Begin(alice, 0b1, t0); d != DenyAccountSuspended {
		t.Fatalf("new begin not under generation 2: %+v", d)
	}
	f.e.AcquireCapacity(r)
	f.e.Commit(r, RequestID{}, t0)
	f.e.Finish(r, 1, t0)
	if f.usage.events[0].Generation() != 1 {
		t.Fatal("bill does not name the pinned generation")
	}
	if err := f.e.Install(f.snap); !errors.Is(err, ErrOlderGeneration) {
		t.Fatalf("older generation installed: %v", err)
	}
}

func TestInstallRefusesInvalidAndReopening(t *testing.T) {
	f := newFixture(t, func(s *Snapshot, _ *Config) { s.Status = StatusClosed })
	next := *f.snap
	next.Generation, next.Status = 2, StatusActive
	if err := f.e.Install(&next); err == nil {
		t.Fatal("closed account reopened")
	}
	bad := *f.snap
	bad.Generation, bad.Limits.MaxItems = 3, 0
	if err := f.e.Install(&bad); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("invalid snapshot: %v", err)
	}
	if err := f.e.Bind(alice, "nobody"); !errors.Is(err, ErrUnknownAccount) {
		t.Fatalf("bind to unknown account: %v", err)
	}
}

func TestRequireChecksThePinnedSnapshot(t *testing.T) {
	f := newFixture(t, nil)
	ctx, _ := f.e.Begin(alice, 0, t0)
	if r := f.e.Require(&ctx, 0b10); r != DenyNone {
		t.Fatalf("granted bit refused: %s", r)
	}
	if r := f.e.Require(&ctx, 0b100); r != DenyMissingPermission {
		t.Fatalf("missing bit: %s", r)
	}
	if r := f.e.Require(&RequestContext{}, 0); r != DenyUnknownPrincipal {
		t.Fatalf("zero context: %s", r)
	}
	if f.e.Counters().Denials[DenyMissingPermission] != 1 {
		t.Fatal("refusal not counted")
	}
}

func TestReservationAccessors(t *testing.T) {
	f := newFixture(t, nil)
	r, _ := f.admit(oneReq, t0)
	if f.e.Quote(r) != 102 || f.e.Deadline(r) != t0+30e9 {
		t.Fatalf("quote %d deadline %d", f.e.Quote(r), f.e.Deadline(r))
	}
	if p, ok := f.e.PrincipalOf(r); !ok || p != alice {
		t.Fatal("principal of a live reservation")
	}
	f.e.Cancel(r, t0)
	if _, ok := f.e.PrincipalOf(r); ok || f.e.Quote(r) != 0 || f.e.Deadline(r) != 0 {
		t.Fatal("accessors answer for an ended reservation")
	}
}

// TestPolicyIsTwoCacheLines keeps the hot policy copy within two lines: the
// scale benchmarks depend on how few lines an admission touches.
func TestPolicyIsTwoCacheLines(t *testing.T) {
	if s := unsafe.Sizeof(policy{}); s > 128 {
		t.Fatalf("policy is %d bytes, more than two cache lines", s)
	}
	// The request path's state ends with the lease's first 56 bytes, which
	// must still fall in the account's fourth line.
	if end := unsafe.Offsetof(account{}.lease) + 56; end > 4*64 {
		t.Fatalf("the lease's hot part ends at byte %d, past the fourth line", end)
	}
	// Accounts live in arena chunks that start page-aligned. A size that is
	// a multiple of 128 bytes starts every account on a 128-byte boundary,
	// so its four hot lines are two adjacent-line prefetch pairs, not three
	// (measured: 1M accounts −15% side by side, bench/compare.sh).
	if s := unsafe.Sizeof(account{}); s%128 != 0 {
		t.Fatalf("account is %d bytes, not a multiple of 128", s)
	}
}
