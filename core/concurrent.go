package core

import (
	"sync"
	"sync/atomic"
)

// Concurrent lets many goroutines admit through engines they do not own. It
// stripes accounts over engines, each behind its own mutex: requests for
// different accounts rarely meet, requests for one account serialise on its
// stripe. This is the supported way in for Go programs that cannot give each
// account a home goroutine; tollgated's shards use Engine directly.
type Concurrent struct {
	stripes []stripe
	routes  atomic.Pointer[map[Principal]uint32]
	bindMu  sync.Mutex // serialises route updates (copy on write)
}

type stripe struct {
	mu sync.Mutex
	e  *Engine
	_  [64]byte // keep neighbouring stripes' locks off one cache line
}

// Ticket is a reservation made through Concurrent: the stripe and handle.
type Ticket struct {
	stripe uint32
	r      Reservation
}

// NewConcurrent returns n stripes (rounded up to a power of two), each an
// engine configured by cfg. A shared Gate is not allowed: each stripe gets
// its own copy of cfg.Gate's pool sizes.
func NewConcurrent(n int, cfg Config) *Concurrent {
	size := 1
	for size < n {
		size <<= 1
	}
	c := &Concurrent{stripes: make([]stripe, size)}
	for i := range c.stripes {
		sc := cfg
		if cfg.Gate != nil {
			g := *cfg.Gate
			g.sharedUsed, g.reserveUsed = 0, 0
			sc.Gate = &g
		}
		c.stripes[i].e = NewEngine(sc)
	}
	empty := map[Principal]uint32{}
	c.routes.Store(&empty)
	return c
}

func (c *Concurrent) stripeOf(id AccountID) uint32 {
	// FNV-1a: stable and cheap; account ids are short.
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return h & uint32(len(c.stripes)-1)
}

// With runs fn on the engine that owns account id, under its lock; use it
// for control-plane work (Install, GrantLease, evidence, counters).
func (c *Concurrent) With(id AccountID, fn func(*Engine) error) error {
	s := &c.stripes[c.stripeOf(id)]
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(s.e)
}

// Bind routes principal to account id. Routes are copied on write, so
// binding is O(principals); use BindMany to load many at once.
func (c *Concurrent) Bind(p Principal, id AccountID) error {
	return c.BindMany(map[Principal]AccountID{p: id})
}

// BindMany routes every principal in binds to its account.
func (c *Concurrent) BindMany(binds map[Principal]AccountID) error {
	c.bindMu.Lock()
	defer c.bindMu.Unlock()
	old := *c.routes.Load()
	next := make(map[Principal]uint32, len(old)+len(binds))
	for p, s := range old {
		next[p] = s
	}
	for p, id := range binds {
		si := c.stripeOf(id)
		if err := c.With(id, func(e *Engine) error { return e.Bind(p, id) }); err != nil {
			return err
		}
		if prev, ok := old[p]; ok && prev != si {
			c.stripes[prev].mu.Lock()
			c.stripes[prev].e.Unbind(p)
			c.stripes[prev].mu.Unlock()
		}
		next[p] = si
	}
	c.routes.Store(&next)
	return nil
}

// Unbind revokes principal.
func (c *Concurrent) Unbind(p Principal) {
	c.bindMu.Lock()
	defer c.bindMu.Unlock()
	old := *c.routes.Load()
	si, ok := old[p]
	if !ok {
		return
	}
	next := make(map[Principal]uint32, len(old))
	for q, s := range old {
		if q != p {
			next[q] = s
		}
	}
	c.stripes[si].mu.Lock()
	c.stripes[si].e.Unbind(p)
	c.stripes[si].mu.Unlock()
	c.routes.Store(&next)
}

// Admit runs Begin and Admit as one step for principal. The usage slot is
// owned by the call, as with Engine.Admit.
func (c *Concurrent) Admit(p Principal, required PermissionSet, work []WorkItem, slot UsageSlot, now int64) (Ticket, Denial) {
	si, ok := (*c.routes.Load())[p]
	if !ok {
		slot.Release()
		return Ticket{}, Denial{Reason: DenyUnknownPrincipal}
	}
	s := &c.stripes[si]
	s.mu.Lock()
	ctx, reason := s.e.Begin(p, required, now)
	var r Reservation
	d := Denial{Reason: reason}
	if reason != DenyNone {
		slot.Release()
	} else {
		r, d = s.e.Admit(&ctx, work, slot, now)
	}
	s.mu.Unlock()
	return Ticket{stripe: si, r: r}, d
}

// Start runs AcquireCapacity and Commit as one step: call it when
// execution begins.
// ReasonOf(err) names a refusal.
func (c *Concurrent) Start(t Ticket, id RequestID, now int64) error {
	s := &c.stripes[t.stripe]
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.e.AcquireCapacity(t.r); err != nil {
		return err
	}
	return s.e.Commit(t.r, id, now)
}

// Finish bills a started ticket.
func (c *Concurrent) Finish(t Ticket, units CostUnits, now int64) (CostUnits, error) {
	s := &c.stripes[t.stripe]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e.Finish(t.r, units, now)
}

// Cancel ends a ticket that has not started, charging nothing.
func (c *Concurrent) Cancel(t Ticket, now int64) error {
	s := &c.stripes[t.stripe]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e.Cancel(t.r, now)
}

// Expire sweeps every stripe; call it periodically from one goroutine.
func (c *Concurrent) Expire(now int64) int {
	n := 0
	for i := range c.stripes {
		s := &c.stripes[i]
		s.mu.Lock()
		n += s.e.Expire(now)
		s.mu.Unlock()
	}
	return n
}

// Counters sums every stripe's counters.
func (c *Concurrent) Counters() Counters {
	var sum Counters
	for i := range c.stripes {
		s := &c.stripes[i]
		s.mu.Lock()
		x := s.e.counters
		s.mu.Unlock()
		sum.add(&x)
	}
	return sum
}

func (c *Counters) add(x *Counters) {
	c.Admitted += x.Admitted
	c.UnitsAdmitted = mustAdd(c.UnitsAdmitted, x.UnitsAdmitted)
	for i := range c.Denials {
		c.Denials[i] += x.Denials[i]
	}
	c.Started += x.Started
	c.Shed += x.Shed
	c.RefusedAtStart += x.RefusedAtStart
	c.Cancelled += x.Cancelled
	c.ExpiredPending += x.ExpiredPending
	c.Finished += x.Finished
	c.Lapsed += x.Lapsed
	c.UnitsBilled = mustAdd(c.UnitsBilled, x.UnitsBilled)
	c.Overage += x.Overage
	c.CommitRefusals += x.CommitRefusals
}
