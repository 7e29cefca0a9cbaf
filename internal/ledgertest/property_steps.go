package ledgertest

// The steps of testRandomSequences: each draws its arguments, calls the
// store, and checks the outcome against the model before updating it.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"pgregory.net/rapid"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// seed starts every case with a funded org, so that the random steps
// spend their time on grants and usage rather than on refusals.
func (m *machine) seed(t *rapid.T) {
	org := &modelAccount{id: "a0", metered: true, scope: core.ScopeOrg}
	if _, _, err := m.s.CreateAccount(m.ctx, ledger.AccountSpec{ID: org.id}, m.now); err != nil {
		t.Fatal(err)
	}
	m.accounts, m.byID[org.id] = append(m.accounts, org), org
	u := core.CostUnits(rapid.IntRange(1, 2000).Draw(t, "seed deposit"))
	if _, _, err := m.s.Deposit(m.ctx, org.id, u, "seed", m.now); err != nil {
		t.Fatal(err)
	}
	m.deposits[string(org.id)+"\x00seed"] = u
}

func (m *machine) create(t *rapid.T) {
	if len(m.accounts) >= 8 {
		t.Skip("enough accounts")
	}
	var parent *modelAccount
	if len(m.accounts) > 0 && rapid.Bool().Draw(t, "child") {
		parent = rapid.SampledFrom(m.accounts).Draw(t, "parent")
	}
	spec := ledger.AccountSpec{ID: core.AccountID(fmt.Sprintf("a%d", len(m.accounts))), Unmetered: rapid.IntRange(0, 3).Draw(t, "unmetered") == 0}
	scope := core.ScopeOrg
	if parent != nil {
		spec.Parent = parent.id
		scope = parent.scope - 1 // org → workspace → agent
	}
	a, created, err := m.s.CreateAccount(m.ctx, spec, m.now)
	if (parent == nil && spec.Unmetered) || scope == core.ScopeNone {
		is(t, "invalid create", err, ledger.ErrInvalid)
		return
	}
	if err != nil || !created || a.Scope != scope {
		t.Fatalf("create %+v: %v, created %v, scope %s", spec, err, created, a.Scope)
	}
	ma := &modelAccount{id: spec.ID, parent: parent, metered: !spec.Unmetered, scope: scope}
	m.accounts = append(m.accounts, ma)
	m.byID[ma.id] = ma
}

func (m *machine) deposit(t *rapid.T) {
	a := m.pickAccount(t)
	// A few amounts and keys, so that repeats (dup) and conflicts happen.
	u := rapid.SampledFrom([]core.CostUnits{0, 50, 200, 1000}).Draw(t, "units")
	key := rapid.SampledFrom([]string{"k0", "k1", "k2", "k3", "k4"}).Draw(t, "key")
	before, err := m.s.Account(m.ctx, a.id)
	is(t, "account", err, nil)
	got, dup, err := m.s.Deposit(m.ctx, a.id, u, key, m.now)
	prev, seen := m.deposits[string(a.id)+"\x00"+key]
	switch {
	case u == 0:
		is(t, "zero deposit", err, ledger.ErrInvalid)
	case seen && prev == u:
		if !dup || err != nil || moneyOf(got) != moneyOf(before) {
			t.Fatalf("repeat deposit: dup %v, %v", dup, err)
		}
	case seen:
		is(t, "conflicting deposit", err, ledger.ErrConflict)
	case !a.metered:
		is(t, "deposit to unmetered", err, ledger.ErrInvalid)
	case a.status == core.StatusClosed:
		is(t, "deposit to closed", err, ledger.ErrClosedAccount)
	default:
		repaid := min(u, before.Overage) // a deposit repays debt first
		if err != nil || dup || got.TopUpLeft != before.TopUpLeft+u-repaid || got.Deposited != before.Deposited+u ||
			got.Overage != before.Overage-repaid || got.Repaid != before.Repaid+repaid {
			t.Fatalf("deposit %d: dup %v, %v; %+v after %+v", u, dup, err, got, before)
		}
		m.deposits[string(a.id)+"\x00"+key] = u
	}
}

func (m *machine) budget(t *rapid.T) {
	a := m.pickAccount(t)
	b := ledger.Budget{Period: ledger.Period(rapid.IntRange(0, 3).Draw(t, "period")), Allowance: units(t, "allowance", 300)}
	before, err := m.s.Account(m.ctx, a.id)
	is(t, "account", err, nil)
	got, err := m.s.SetBudget(m.ctx, a.id, b, m.now)
	switch {
	case b.Period == ledger.PeriodNone && b.Allowance != 0, !a.metered:
		is(t, "invalid budget", err, ledger.ErrInvalid)
	case a.status == core.StatusClosed:
		is(t, "budget of closed", err, ledger.ErrClosedAccount)
	case before.Budget == b: // a no-op
		if err != nil || moneyOf(got) != moneyOf(before) || got.PeriodEnd != before.PeriodEnd {
			t.Fatalf("same budget %+v: %v, %+v after %+v", b, err, got, before)
		}
	default:
		repaid := min(b.Allowance, before.Overage) // a new allowance repays debt first
		if err != nil || got.Budget != b || got.AllowanceLeft != b.Allowance-repaid ||
			(b.Period != ledger.PeriodNone && !(got.PeriodStart <= m.now && m.now < got.PeriodEnd)) {
			t.Fatalf("budget %+v at %d: %v, %+v", b, m.now, err, got)
		}
	}
}

func (m *machine) status(t *rapid.T) {
	a := m.pickAccount(t)
	s := []core.Status{0, 0, 0, 0, 0, 1, 1, 1, 2}[rapid.IntRange(0, 8).Draw(t, "status")]
	got, err := m.s.SetStatus(m.ctx, a.id, s)
	if a.status == core.StatusClosed && s != core.StatusClosed {
		is(t, "reopen", err, ledger.ErrClosedAccount)
		return
	}
	if err != nil || got.Status != s {
		t.Fatalf("status %s: %v, %+v", s, err, got)
	}
	a.status = s
}

func (m *machine) acquire(t *rapid.T) {
	a := m.pickAccount(t)
	want, need := units(t, "want", 300), units(t, "need", 300)
	ttl := rapid.Int64Range(second, 2*hour).Draw(t, "ttl")
	l, _, err := m.s.Acquire(m.ctx, a.id, "node-a", want, need, ttl, m.now)
	if want == 0 {
		is(t, "want 0", err, ledger.ErrInvalid)
		return
	}
	m.refusedOrGranted(t, a, l, err, want, need)
}

// releasable checks the common refusals of release and consolidate and reports
// whether the call should have released the lease.
func (m *machine) releasable(t *rapid.T, l *modelLease, token uint64, unspent core.CostUnits, err error) bool {
	t.Helper()
	switch {
	case l.state == ledger.LeaseReleased: // a forfeited lease is restored (ledger.Release)
		is(t, "not active", err, ledger.ErrLeaseNotActive)
	case token != l.lease.Token:
		is(t, "fenced", err, ledger.ErrFenced)
	case unspent > l.lease.Granted-l.used:
		is(t, "too much unspent", err, ledger.ErrInvalid)
	default:
		return true
	}
	return false
}

func (m *machine) drawRelease(t *rapid.T) (*modelLease, uint64, core.CostUnits) {
	l := m.pickLease(t)
	token := l.lease.Token
	if rapid.IntRange(0, 5).Draw(t, "fence") == 0 {
		token++
	}
	left := uint64(l.lease.Granted - l.used)
	return l, token, core.CostUnits(rapid.Uint64Range(0, left+1).Draw(t, "unspent"))
}

func (m *machine) release(t *rapid.T) {
	l, token, unspent := m.drawRelease(t)
	err := m.s.Release(m.ctx, l.lease.ID, token, unspent, m.now)
	if m.releasable(t, l, token, unspent, err) {
		is(t, "release", err, nil)
		l.state, l.credited = ledger.LeaseReleased, unspent
	}
}

func (m *machine) extend(t *rapid.T) {
	l := m.pickLease(t)
	token := l.lease.Token
	if rapid.IntRange(0, 5).Draw(t, "fence") == 0 {
		token++
	}
	want, need := units(t, "want", 300), units(t, "need", 300)
	ttl := rapid.Int64Range(second, 2*hour).Draw(t, "ttl")
	n, _, err := m.s.Extend(m.ctx, l.lease.ID, token, want, need, ttl, m.now)
	r, refused := errors.AsType[*ledger.Refusal](err)
	a := m.byID[l.lease.Account]
	switch {
	case l.state != ledger.LeaseActive:
		is(t, "not active", err, ledger.ErrLeaseNotActive)
	case token != l.lease.Token:
		is(t, "fenced", err, ledger.ErrFenced)
	case errors.Is(err, ledger.ErrPeriodEnded):
		// A funder rolled into a new period: the model does not track
		// periods, but the check after this step sees nothing changed.
	case inactive(a) != nil:
		if !refused || r.Reason != ledger.RefusedInactive || r.Account != inactive(a).id {
			t.Fatalf("extend under inactive %s: %v", inactive(a).id, err)
		}
	case err != nil:
		t.Fatalf("extend: %v", err)
	default:
		added := n.Granted - l.lease.Granted
		if n.ID != l.lease.ID || n.Token != l.lease.Token || n.Granted < l.lease.Granted ||
			added > max(want, need) || (want == 0 && added != 0) || n.ExpiresAt != m.now+ttl {
			t.Fatalf("extend %+v by want %d, need %d, ttl %d: %+v", l.lease, want, need, ttl, n)
		}
		l.lease.Granted, l.lease.ExpiresAt = n.Granted, n.ExpiresAt
	}
}

func (m *machine) ingest(t *rapid.T) {
	if len(m.accounts) == 0 {
		t.Skip("no account yet") // before the model changes: skipping later would corrupt it
	}
	n := rapid.IntRange(1, 5).Draw(t, "events")
	events := make([]ledger.Usage, 0, n)
	want := make([]ledger.IngestResult, 0, n)
	inBatch := map[[16]byte]bool{}
	for range n {
		id := eventID(uint64(len(m.events)) + 1)
		kind := rapid.IntRange(0, 5).Draw(t, "kind")
		if kind == 4 && len(m.events) == 0 {
			kind = 2
		}
		if kind <= 1 && len(m.leases) == 0 {
			kind = 5
		}
		var e ledger.Usage
		verdict := ledger.Rejected
		switch kind {
		case 0, 1: // lease usage, with a bad token for kind 1
			l := m.pickLease(t)
			e = leaseUsage(0, l.lease, units(t, "units", int(l.room())+3))
			if kind == 1 {
				e.Token++
			} else if e.Units > 0 && e.Units <= l.room() {
				verdict = ledger.Accepted
				l.used += e.Units
				settle(l.funders, e.Units)
			}
		case 2, 3: // overage, post-paid
			a := m.pickAccount(t)
			e = ledger.Usage{Account: a.id, Source: ledger.UsageOverage, Units: units(t, "units", 50)}
			if kind == 3 {
				e.Source = ledger.UsagePostPaid
			}
			if e.Units > 0 {
				verdict = ledger.Accepted
				settle(chain(a), e.Units)
			}
		case 4: // a duplicate of an earlier event
			id = rapid.SampledFrom(m.events).Draw(t, "duplicate")
			e = ledger.Usage{Account: "nobody", Source: ledger.UsageOverage, Units: 1}
		case 5:
			e = ledger.Usage{Account: "nobody", Source: ledger.UsagePostPaid, Units: 1}
		}
		e.ID = id
		if kind == 4 || inBatch[id] {
			verdict = ledger.Duplicate
		}
		if kind != 4 {
			m.events = append(m.events, id)
		}
		inBatch[id] = true
		events = append(events, e)
		want = append(want, verdict)
	}
	got, err := m.s.Ingest(m.ctx, events, m.now)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ingest %+v: %v, %v; want %v", events, got, err, want)
	}
}

func (m *machine) reclaim(t *rapid.T) {
	grace := rapid.Int64Range(0, hour).Draw(t, "grace")
	limit := rapid.IntRange(1, 4).Draw(t, "limit")
	var due []*modelLease
	for _, l := range m.leases {
		if l.state == ledger.LeaseActive && l.lease.ExpiresAt+grace <= m.now {
			due = append(due, l)
		}
	}
	slices.SortFunc(due, func(a, b *modelLease) int {
		return cmp.Or(cmp.Compare(a.lease.ExpiresAt, b.lease.ExpiresAt), cmp.Compare(a.lease.ID, b.lease.ID))
	})
	due = due[:min(limit, len(due))]
	n, err := m.s.Reclaim(m.ctx, m.now, grace, limit)
	if err != nil || n != len(due) {
		t.Fatalf("reclaim: %d, %v; want %d", n, err, len(due))
	}
	for _, l := range due {
		l.state = ledger.LeaseReclaimed
	}
}

func (m *machine) rollover(t *rapid.T) {
	limit := rapid.IntRange(1, 5).Draw(t, "limit")
	accts, err := m.s.Accounts(m.ctx)
	is(t, "accounts", err, nil)
	due := 0
	for _, a := range accts {
		if a.Budget.Period != ledger.PeriodNone && a.PeriodEnd <= m.now {
			due++
		}
	}
	n, err := m.s.Rollover(m.ctx, m.now, limit)
	if err != nil || n != min(limit, due) {
		t.Fatalf("rollover (limit %d, %d due): %d, %v", limit, due, n, err)
	}
}

func (m *machine) advance(t *rapid.T) {
	step := rapid.SampledFrom([]int64{second, minute, 30 * minute, hour, 6 * hour, day, 3 * day, 7 * day, 31 * day}).Draw(t, "step")
	m.now += step + rapid.Int64Range(0, hour).Draw(t, "jitter")
}

func (m *machine) restart(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "restart") != 0 {
		t.Skip("restart less often than other steps: it is the slowest")
	}
	if err := m.s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	m.s = m.open(m.tt, m.dir)
}
