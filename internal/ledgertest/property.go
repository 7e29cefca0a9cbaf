package ledgertest

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// testRandomSequences drives a fresh store per case through a random
// sequence of every kind of call, with time moving forward by random
// amounts across day, week and month boundaries and restarts in between.
// A model predicts each call's outcome (error kind, refusal, ingest
// verdicts, how many leases a reclaim ends and how many accounts a
// rollover moves), and after every step:
//
//   - Store.Check passes, and L1 holds for every account;
//   - every account's Settled is exactly what the model billed to it, and
//     its status and next fencing token are the model's;
//   - every lease's Used, Credited and State are the model's, and usage
//     accepted against a lease never exceeds its Granted (bounded spend);
//   - the sum of lease usage settled never exceeds the sum granted.
func testRandomSequences(h *harness) {
	rapid.Check(h.t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp(h.dir, "case")
		if err != nil {
			rt.Fatal(err)
		}
		m := &machine{tt: h.t, open: h.open, dir: dir, ctx: h.ctx, s: h.open(h.t, dir),
			now:  t0 + rapid.Int64Range(-40*day, 40*day).Draw(rt, "start"),
			byID: map[core.AccountID]*modelAccount{}, deposits: map[string]core.CostUnits{}}
		defer func() {
			if err := m.s.Close(); err != nil {
				rt.Error(err)
			}
			os.RemoveAll(dir)
		}()
		m.seed(rt)
		rt.Repeat(m.actions())
	})
}

type modelAccount struct {
	id        core.AccountID
	parent    *modelAccount
	metered   bool
	scope     core.Scope
	status    core.Status
	settled   core.CostUnits
	lastToken uint64
}

type modelLease struct {
	lease          ledger.Lease // as granted
	used, credited core.CostUnits
	state          ledger.LeaseState
	funders        []*modelAccount
}

// room is how much more usage the lease can accept.
func (l *modelLease) room() core.CostUnits {
	if l.state == ledger.LeaseActive {
		return l.lease.Granted - l.used
	}
	return l.lease.Granted - l.used - l.credited
}

type machine struct {
	tt       *testing.T
	open     Opener
	dir      string
	s        ledger.Store
	ctx      context.Context
	now      int64
	accounts []*modelAccount
	byID     map[core.AccountID]*modelAccount
	leases   []*modelLease
	deposits map[string]core.CostUnits // account ⧺ 0 ⧺ key → units
	events   [][16]byte
}

// chain is the model's funding chain of a, leaf first.
func chain(a *modelAccount) []*modelAccount {
	var c []*modelAccount
	for ; a != nil; a = a.parent {
		if a.metered {
			c = append(c, a)
		}
	}
	return c
}

// inactive is the model's first inactive account of a's ancestry, or nil.
func inactive(a *modelAccount) *modelAccount {
	for ; a != nil; a = a.parent {
		if a.status != core.StatusActive {
			return a
		}
	}
	return nil
}

func (m *machine) pickAccount(t *rapid.T) *modelAccount {
	if len(m.accounts) == 0 {
		t.Skip("no account yet")
	}
	return rapid.SampledFrom(m.accounts).Draw(t, "account")
}

func (m *machine) pickLease(t *rapid.T) *modelLease {
	if len(m.leases) == 0 {
		t.Skip("no lease yet")
	}
	return rapid.SampledFrom(m.leases).Draw(t, "lease")
}

func units(t *rapid.T, label string, max int) core.CostUnits {
	return core.CostUnits(rapid.IntRange(0, max).Draw(t, label))
}

// is fails unless errors.Is(err, want) (want nil: err must be nil).
func is(t *rapid.T, what string, err, want error) {
	t.Helper()
	if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// granted records a new lease in the model and checks its token.
func (m *machine) granted(t *rapid.T, a *modelAccount, l ledger.Lease, want, need core.CostUnits) {
	t.Helper()
	if l.Account != a.id || l.Token != a.lastToken+1 || l.Granted == 0 || l.Granted > max(want, need) ||
		l.State != ledger.LeaseActive || l.GrantedAt != m.now {
		t.Fatalf("grant to %s (last token %d, want %d, need %d): %+v", a.id, a.lastToken, want, need, l)
	}
	a.lastToken = l.Token
	m.leases = append(m.leases, &modelLease{lease: l, state: ledger.LeaseActive, funders: chain(a)})
}

// refusedOrGranted checks an acquire's outcome against the model: inactive
// ancestry must be refused as such; otherwise a grant or an exhaustion.
func (m *machine) refusedOrGranted(t *rapid.T, a *modelAccount, l ledger.Lease, err error, want, need core.CostUnits) {
	t.Helper()
	r, refused := errors.AsType[*ledger.Refusal](err)
	if in := inactive(a); in != nil {
		if !refused || r.Reason != ledger.RefusedInactive || r.Account != in.id {
			t.Fatalf("acquire for %s under inactive %s: %v", a.id, in.id, err)
		}
		return
	}
	switch {
	case refused && r.Reason == ledger.RefusedExhausted:
		if !slices.ContainsFunc(chain(a), func(c *modelAccount) bool { return c.id == r.Account }) || r.Evidence.Scope == core.ScopeNone {
			t.Fatalf("exhaustion of %s refused by %s, outside its funding chain (%+v)", a.id, r.Account, r)
		}
	case err != nil:
		t.Fatalf("acquire for %s: %v", a.id, err)
	default:
		m.granted(t, a, l, want, need)
	}
}

// settle bills units to every account of c in the model.
func settle(c []*modelAccount, u core.CostUnits) {
	for _, a := range c {
		a.settled += u
	}
}

func (m *machine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"create":   m.create,
		"deposit":  m.deposit,
		"budget":   m.budget,
		"status":   m.status,
		"acquire":  m.acquire,
		"extend":   m.extend,
		"release":  m.release,
		"ingest":   m.ingest,
		"reclaim":  m.reclaim,
		"rollover": m.rollover,
		"advance":  m.advance,
		"restart":  m.restart,
		"":         m.check,
	}
}

// check runs after every step.
func (m *machine) check(t *rapid.T) {
	if err := m.s.Check(m.ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
	accts, err := m.s.Accounts(m.ctx)
	is(t, "accounts", err, nil)
	if len(accts) != len(m.accounts) {
		t.Fatalf("%d accounts, model has %d", len(accts), len(m.accounts))
	}
	for _, a := range accts {
		ma := m.byID[a.ID]
		if err := a.Conserved(); err != nil {
			t.Fatal(err)
		}
		if ma == nil || a.Settled != ma.settled || a.Status != ma.status || a.NextToken != ma.lastToken+1 {
			t.Fatalf("account %+v, model %+v", a, ma)
		}
	}
	leases, err := m.s.Leases(m.ctx, false)
	is(t, "leases", err, nil)
	if len(leases) != len(m.leases) {
		t.Fatalf("%d leases, model has %d", len(leases), len(m.leases))
	}
	var used, granted core.CostUnits
	var active []ledger.Lease
	for i, l := range leases {
		ml := m.leases[i] // both in grant (id) order
		want := ml.lease
		want.Used, want.Credited, want.State = ml.used, ml.credited, ml.state
		if l != want {
			t.Fatalf("lease %+v, model %+v", l, want)
		}
		if l.Used > l.Granted || l.Used+l.Credited > l.Granted {
			t.Fatalf("bounded spend broken: %+v", l)
		}
		used += l.Used
		granted += l.Granted
		if l.State == ledger.LeaseActive {
			active = append(active, l)
		}
	}
	if used > granted {
		t.Fatalf("lease usage settled %d > granted %d", used, granted)
	}
	got, err := m.s.Leases(m.ctx, true)
	is(t, "active leases", err, nil)
	if len(got) != len(active) || (len(got) > 0 && !slices.Equal(got, active)) {
		t.Fatalf("active leases %+v, want %+v", got, active)
	}
}
