package core

import (
	"testing"

	"pgregory.net/rapid"
)

// trackSlot is a per-reservation usage slot that counts how it ended.
type trackSlot struct {
	recorded, released int
	units              CostUnits
}

func (s *trackSlot) Record(ev *UsageEvent) { s.recorded++; s.units = ev.Units }
func (s *trackSlot) Release()              { s.released++ }

type liveRes struct {
	r    Reservation
	slot *trackSlot
}

// machine drives an engine through random operation sequences and checks
// the invariants after every step.
type machine struct {
	e     *Engine
	now   int64
	slots []*trackSlot
	live  []liveRes
	caps  map[AccountID]CostUnits
	token map[AccountID]uint64
	cells map[AccountID]*EvidenceCell
}

var (
	propAccounts   = []AccountID{"strict", "elastic"}
	propPrincipals = []Principal{{Hi: 1}, {Hi: 2}, {Hi: 3}}
)

func newMachine(t *rapid.T) *machine {
	gate := rapid.SampledFrom([]*Gate{nil, NewUniformGate(3), NewReservedGate(4, 2)}).Draw(t, "gate")
	m := &machine{
		e:     NewEngine(Config{MaxReservations: 8, Gate: gate, SweepInterval: 1}),
		now:   t0,
		caps:  map[AccountID]CostUnits{},
		token: map[AccountID]uint64{},
		cells: map[AccountID]*EvidenceCell{},
	}
	for i, id := range propAccounts {
		s := validSnapshot()
		s.Account = id
		s.Limits.MaxConcurrent = rapid.Uint32Range(0, 4).Draw(t, "maxConc")
		s.Limits.RequestRate, s.Limits.RequestBurst = 50, 5
		s.Limits.HoldTimeout = rapid.Int64Range(1e6, 5e8).Draw(t, "hold")
		s.Capacity = CapacityClass(i)
		if id == "elastic" {
			s.Mode = EnforcementMode{Elastic: true, OverageCap: CostUnits(rapid.Uint64Range(0, 500).Draw(t, "cap"))}
			m.caps[id] = s.Mode.OverageCap
		}
		if err := m.e.Install(s); err != nil {
			t.Fatal(err)
		}
		m.cells[id] = new(EvidenceCell)
		m.e.SetEvidence(id, m.cells[id])
	}
	for i, p := range propPrincipals {
		m.e.Bind(p, propAccounts[i%len(propAccounts)])
	}
	return m
}

func (m *machine) pick(t *rapid.T) (int, liveRes, bool) {
	if len(m.live) == 0 {
		return 0, liveRes{}, false
	}
	i := rapid.IntRange(0, len(m.live)-1).Draw(t, "res")
	return i, m.live[i], true
}

func (m *machine) drop(i int) { m.live = append(m.live[:i], m.live[i+1:]...) }

func (m *machine) step(t *rapid.T) {
	switch rapid.IntRange(0, 9).Draw(t, "op") {
	case 0, 1: // admit
		p := rapid.SampledFrom(propPrincipals).Draw(t, "principal")
		ctx, reason := m.e.Begin(p, 0, m.now)
		if reason.Denied() {
			return
		}
		if rapid.Bool().Draw(t, "ttl") {
			ctx.SetTTL(rapid.Int64Range(1, 3e8).Draw(t, "ttlNs"))
		}
		n := rapid.Uint64Range(0, 120).Draw(t, "count")
		slot := &trackSlot{}
		m.slots = append(m.slots, slot)
		r, d := m.e.Admit(&ctx, []WorkItem{{Op: 0, Count: n}, {Op: 2, Count: n % 3}}, slot, m.now)
		if !d.Denied() {
			m.live = append(m.live, liveRes{r, slot})
		}
	case 2: // capacity + commit
		if i, lr, ok := m.pick(t); ok {
			if err := m.e.AcquireCapacity(lr.r); err != nil {
				if ReasonOf(err) == DenyCapacityUnavailable {
					m.drop(i)
				}
				return
			}
			if err := m.e.Commit(lr.r, RequestID{Lo: uint64(i)}, m.now); ReasonOf(err) != DenyNone {
				m.drop(i)
			}
		}
	case 3: // finish
		if i, lr, ok := m.pick(t); ok {
			q := m.e.res.slots[lr.r.idx].quote
			units := CostUnits(rapid.Uint64Range(0, uint64(q)+1).Draw(t, "billed"))
			if _, err := m.e.Finish(lr.r, units, m.now); err == nil {
				m.drop(i)
			}
		}
	case 4: // cancel
		if i, lr, ok := m.pick(t); ok {
			if m.e.Cancel(lr.r, m.now) == nil {
				m.drop(i)
			}
		}
	case 5: // time passes, deadlines sweep
		m.now += rapid.Int64Range(0, 2e8).Draw(t, "dt")
		m.e.Expire(m.now)
		m.forgetEnded()
	case 6: // the control plane grants, tops up or supersedes
		id := rapid.SampledFrom(propAccounts).Draw(t, "acct")
		tok := m.token[id]
		if tok == 0 || rapid.Bool().Draw(t, "newToken") {
			tok++
		}
		units := CostUnits(rapid.Uint64Range(0, 2000).Draw(t, "grant"))
		until := m.now + rapid.Int64Range(-1e8, 1e9).Draw(t, "usable")
		if m.e.GrantLease(id, tok, units, until, 100) == nil {
			m.token[id] = tok
		}
	case 7: // the control plane takes funding back
		id := rapid.SampledFrom(propAccounts).Draw(t, "acct")
		l, _ := m.e.Lease(id)
		if rapid.Bool().Draw(t, "unspent") {
			l.TakeUnspent()
		} else {
			l.TakeRetired(nil)
		}
		m.e.DrainRefills(nil)
	case 8: // evidence published or withdrawn
		id := rapid.SampledFrom(propAccounts).Draw(t, "acct")
		if rapid.Bool().Draw(t, "clear") {
			m.cells[id].Clear()
		} else {
			m.cells[id].Store(FundingEvidence{Remaining: CostUnits(rapid.Uint64Range(0, 300).Draw(t, "remaining")), Scope: ScopeOrg})
		}
	case 9: // a stale handle is used
		if _, lr, ok := m.pick(t); ok {
			stale := Reservation{idx: lr.r.idx, gen: lr.r.gen - 1}
			if m.e.Cancel(stale, m.now) == nil {
				t.Fatal("stale handle cancelled a reservation")
			}
		}
	}
	m.forgetEnded()
}

// forgetEnded drops handles the engine ended on its own (expiry).
func (m *machine) forgetEnded() {
	kept := m.live[:0]
	for _, lr := range m.live {
		if m.e.res.lookup(lr.r) != nil {
			kept = append(kept, lr)
		}
	}
	m.live = kept
}

func (m *machine) check(t *rapid.T) {
	c := m.e.Counters()
	notStarted, started := m.e.Outstanding()
	if c.TerminalSum()+uint64(notStarted) != c.Admitted {
		t.Fatalf("admission partition: %+v, not started %d", c, notStarted)
	}
	if c.Finished+c.Lapsed+uint64(started) != c.Started {
		t.Fatalf("billing partition: %+v, started in flight %d", c, started)
	}
	if len(m.live) != m.e.InFlight() {
		t.Fatalf("model has %d live, engine %d", len(m.live), m.e.InFlight())
	}
	var billedEvents, billedUnits CostUnits
	var leaseBilled CostUnits
	for _, s := range m.slots {
		if s.recorded+s.released > 1 {
			t.Fatalf("slot ended %d times", s.recorded+s.released)
		}
		if s.recorded == 1 {
			billedEvents++
			billedUnits += s.units
		}
	}
	if uint64(billedEvents) != c.Finished+c.Lapsed || billedUnits != c.UnitsBilled {
		t.Fatalf("events %d / %d units vs counters %+v", billedEvents, billedUnits, c)
	}
	for _, id := range propAccounts {
		l, _ := m.e.Lease(id)
		b := l.Balance()
		if !b.Conserved() {
			t.Fatalf("%s lease not conserved: %+v", id, b)
		}
		if b.Billed > b.Granted {
			t.Fatalf("%s spent %d of %d granted", id, b.Billed, b.Granted)
		}
		leaseBilled += b.Billed
		if o := m.e.Overage(id); o > m.caps[id] {
			t.Fatalf("%s overage %d over cap %d", id, o, m.caps[id])
		}
	}
	if leaseBilled > c.UnitsBilled {
		t.Fatalf("lease billed %d > total billed %d", leaseBilled, c.UnitsBilled)
	}
	if m.e.gate != nil {
		s, r := m.e.gate.InUse()
		if s > m.e.gate.shared || r > m.e.gate.reserve {
			t.Fatalf("gate over capacity: %d/%d %d/%d", s, m.e.gate.shared, r, m.e.gate.reserve)
		}
	}
}

// TestRandomSequencesConserveUnits drives thousands of random operation
// sequences, asserting conservation and the outcome partition after every
// step, and at the end that draining everything leaves nothing held.
func TestRandomSequencesConserveUnits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newMachine(t)
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for range steps {
			m.step(t)
			m.check(t)
		}
		m.now += MaxHoldTimeout
		m.e.Expire(m.now)
		m.forgetEnded()
		m.check(t)
		if m.e.InFlight() != 0 {
			t.Fatalf("%d reservations survived every deadline", m.e.InFlight())
		}
		for _, s := range m.slots {
			if s.recorded+s.released != 1 && s.recorded+s.released != 0 {
				t.Fatalf("slot ended %d times", s.recorded+s.released)
			}
		}
		for _, id := range propAccounts {
			l, _ := m.e.Lease(id)
			if b := l.Balance(); b.Held != 0 || b.Outstanding != 0 {
				t.Fatalf("%s still holds %+v at quiescence", id, b)
			}
		}
	})
}
