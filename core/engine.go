package core

import "errors"

// Config sets an engine's fixed limits.
type Config struct {
	// MaxReservations bounds reservations in flight (pending, ready or
	// committed). Admission refuses with DenyCapacityUnavailable when full.
	MaxReservations int
	// Gate, when non-nil, limits concurrent execution (AcquireCapacity).
	Gate *Gate
	// SweepInterval is the least time between two deadline sweeps (ns):
	// deadlines are honoured within it. Zero means 10 ms.
	SweepInterval int64
}

// DefaultMaxReservations is used when Config.MaxReservations is zero.
const DefaultMaxReservations = 1 << 16

// account is one account's state in an engine. Field order is deliberate:
// the request path touches the first few cache lines only (policy, buckets,
// gauges, the lease's spendable units), the rest is control-plane state.
type account struct {
	// hot is a copy of the installed policy inside the account, so the
	// request path reads policy from the account's own cache lines instead
	// of chasing a pointer: with a million accounts scattered in memory,
	// every line an admission touches is likely a miss, so the state it
	// touches is packed into the first four lines (two of policy, two of
	// state), measured by BenchmarkFullPathAccounts. pinned is the heap copy
	// of the same policy that requests pin; a pinned request reads hot only
	// while pinned is still the installed one, when the two are equal.
	hot     policy         // lines 0-1 (112 bytes)
	pinned  *policy        // line 1
	primary principalEntry // lines 1-2
	// holdAvg is a moving average of how long reservations are held (ns),
	// used to tell a concurrency-limited caller when a slot may free up.
	holdAvg  int64
	inflight uint32
	shared   bool // share, not the snapshot, sets rate and concurrency
	// refillQueued and rateStarved: a refill request is queued; the share
	// refused a request since the last drain.
	refillQueued, rateStarved bool
	req, units                bucket    // lines 2-3
	lease                     LeaseSlot // line 3 (its first 56 bytes); the rest is cold
	id                        AccountID
	snap                      *Snapshot // the installed snapshot (install checks)
	overage                   CostUnits // elastic overage held or billed on this engine
	share                     Share
	evidence                  *EvidenceCell
	primaryTaken              bool
	_                         [80]byte // to 512 bytes: 128-byte aligned, see TestPolicyIsTwoCacheLines
}

// policy returns the policy a request pinned to p must be judged by: the
// account's own copy when p is still the installed one.
func (a *account) policy(p *policy) *policy {
	if a.pinned == p {
		return &a.hot
	}
	return p
}

type principalEntry struct {
	acct     *account
	who      Principal
	inflight uint32
}

// Engine is the admission state machine for the accounts one shard owns.
// It is not safe for concurrent use: one goroutine owns it. See Concurrent.
type Engine struct {
	principals principalTable
	accounts   map[AccountID]*account
	arena      accountArena
	res        resTable
	gate       *Gate
	counters   Counters
	refills    []*account
	sweepEvery int64
	nextSweep  int64
	event      UsageEvent // the event being recorded; see bill
}

// NewEngine returns an engine with no accounts.
func NewEngine(cfg Config) *Engine {
	n := cfg.MaxReservations
	if n <= 0 {
		n = DefaultMaxReservations
	}
	every := cfg.SweepInterval
	if every <= 0 {
		every = 10e6
	}
	return &Engine{
		accounts:   make(map[AccountID]*account),
		res:        newResTable(n),
		gate:       cfg.Gate,
		sweepEvery: every,
	}
}

// ErrOlderGeneration refuses a snapshot that does not move its account's
// generation forward.
var ErrOlderGeneration = errors.New("core: snapshot generation is not newer than the installed one")

// ErrUnknownAccount reports an operation on an account never installed.
var ErrUnknownAccount = errors.New("core: unknown account")

// Install publishes snap as its account's current policy, creating the
// account on first sight. Requests already begun keep the snapshot they
// pinned. Generations only move forward; a closed account stays closed.
func (e *Engine) Install(snap *Snapshot) error {
	if err := snap.Validate(); err != nil {
		return err
	}
	a := e.accounts[snap.Account]
	if a == nil {
		a = e.arena.alloc()
		a.id = snap.Account
		e.accounts[snap.Account] = a
	} else {
		if snap.Generation <= a.snap.Generation {
			return ErrOlderGeneration
		}
		if a.snap.Status == StatusClosed && snap.Status != StatusClosed {
			return invalid("account %s is closed", snap.Account)
		}
	}
	p := compilePolicy(snap)
	a.snap, a.pinned, a.hot = snap, &p, p
	return nil
}

// Bind lets principal act for account. Rebinding moves it.
func (e *Engine) Bind(p Principal, id AccountID) error {
	a := e.accounts[id]
	if a == nil {
		return ErrUnknownAccount
	}
	if pe := e.principals.get(p); pe != nil && pe.acct == a {
		return nil
	}
	// An account's first principal lives inside the account, so the common
	// one-key account costs one allocation and one cache miss less.
	pe := &a.primary
	if a.primaryTaken {
		pe = &principalEntry{}
	}
	a.primaryTaken = true
	*pe = principalEntry{acct: a, who: p}
	e.principals.put(p, pe)
	return nil
}

// Unbind revokes principal: its next Begin is refused as unknown. Requests
// already begun finish under the snapshot they pinned.
func (e *Engine) Unbind(p Principal) { e.principals.remove(p) }

// SetEvidence attaches the cell through which the control plane publishes
// id's funding evidence. A nil cell means none is ever published.
func (e *Engine) SetEvidence(id AccountID, cell *EvidenceCell) error {
	a := e.accounts[id]
	if a == nil {
		return ErrUnknownAccount
	}
	a.evidence = cell
	return nil
}

// Lease returns id's lease slot, for the control plane's grants and returns
// (on the engine's goroutine).
func (e *Engine) Lease(id AccountID) (*LeaseSlot, error) {
	a := e.accounts[id]
	if a == nil {
		return nil, ErrUnknownAccount
	}
	return &a.lease, nil
}

// GrantLease adds funding to id's lease slot; see LeaseSlot.Grant.
func (e *Engine) GrantLease(id AccountID, token uint64, units CostUnits, usableUntil int64, lowWater CostUnits) error {
	a := e.accounts[id]
	if a == nil {
		return ErrUnknownAccount
	}
	if err := a.lease.Grant(token, units, usableUntil, lowWater); err != nil {
		return err
	}
	a.refillQueued = false
	return nil
}

// Overage is the elastic overage id holds or has billed on this engine.
func (e *Engine) Overage(id AccountID) CostUnits {
	if a := e.accounts[id]; a != nil {
		return a.overage
	}
	return 0
}

// Counters returns a copy of the engine's counters.
func (e *Engine) Counters() Counters { return e.counters }

// InFlight is the number of live reservations.
func (e *Engine) InFlight() int { return len(e.res.live) }

// CountDenial records a refusal decided outside the engine, such as
// DenyAccountingBackpressure when no usage slot could be reserved.
func (e *Engine) CountDenial(r DenyReason) { e.counters.Denials[r]++ }

// UncountDenial takes back the count of a refusal Admit returned that will
// not be answered: the caller holds the request and runs it again (a
// funding wait), so Denials count refused answers, not attempts.
func (e *Engine) UncountDenial(r DenyReason) {
	if e.counters.Denials[r] == 0 {
		panic("core: invariant broken: a refusal uncounted that was never counted")
	}
	e.counters.Denials[r]--
}

// RefillRequest asks the control plane for more funding for an account,
// or (RateStarved) for a larger share of its limits.
type RefillRequest struct {
	Account     AccountID
	Units       CostUnits // what the current lease still holds
	Needed      CostUnits // the largest quote refused for want of units, or 0
	RateStarved bool      // this engine's share refused a request
	WantsFunds  bool      // low water crossed or a quote refused
	// ReturnDue: a retiring lease funds nothing any more; take its units
	// (LeaseSlot.TakeRetired) back to the control plane.
	ReturnDue bool
}

// DrainRefills appends every pending refill request to dst and clears them.
// Each account appears at most once until its next grant or drain.
func (e *Engine) DrainRefills(dst []RefillRequest) []RefillRequest {
	for _, a := range e.refills {
		dst = append(dst, RefillRequest{Account: a.id, Units: a.lease.cur.units, Needed: a.lease.largestRefused,
			RateStarved: a.rateStarved, WantsFunds: a.lease.wantRefill, ReturnDue: a.lease.returnDue})
		a.refillQueued, a.rateStarved = false, false
	}
	clear(e.refills)
	e.refills = e.refills[:0]
	return dst
}

// noteReturn queues a's request when a retiring lease of its slot went
// idle: a settlement, never the request path's debit, gets here.
func (e *Engine) noteReturn(a *account) {
	if !a.refillQueued {
		a.refillQueued = true
		e.refills = append(e.refills, a)
	}
}

func (e *Engine) noteRefill(a *account) {
	if a.lease.wantRefill && !a.refillQueued {
		a.refillQueued = true
		e.refills = append(e.refills, a)
	}
}

// Outstanding counts live reservations not yet started (pending or ready)
// and started but not yet billed. It walks the live list: for checks and
// scrapes, not for the request path.
func (e *Engine) Outstanding() (notStarted, started int) {
	for _, idx := range e.res.live {
		if e.res.slots[idx].phase == phaseCommitted {
			started++
		} else {
			notStarted++
		}
	}
	return notStarted, started
}

// Quote is a live reservation's quote (0 if r has ended).
func (e *Engine) Quote(r Reservation) CostUnits {
	if rs := e.res.lookup(r); rs != nil {
		return rs.quote
	}
	return 0
}

// Deadline is when a live reservation expires (Unix ns; 0 if r has ended).
func (e *Engine) Deadline(r Reservation) int64 {
	if rs := e.res.lookup(r); rs != nil {
		return rs.deadline
	}
	return 0
}

// Committed describes a committed reservation as the usage event that
// would bill it if it lapsed now (Units = its quote, or 0 for a
// CaptureRelease; OccurredAt = now): for a commit journal, so that a node
// that dies before the reservation ends bills it as its deadline would.
// ok is false unless r is live and committed.
func (e *Engine) Committed(r Reservation, now int64) (ev UsageEvent, ok bool) {
	rs := e.res.lookup(r)
	if rs == nil || rs.phase != phaseCommitted {
		return UsageEvent{}, false
	}
	src := SourceLease
	if rs.token == 0 {
		src = SourceOverage
	}
	return UsageEvent{RequestID: rs.request, Principal: rs.prin.who, Units: rs.lapseUnits(), Quote: rs.quote,
		Source: src, FencingToken: rs.token, OccurredAt: now, Policy: rs.acct.policy(rs.pol).src}, true
}

// SnapshotOf is the snapshot principal p acts under, or nil: for refusals
// that name what refused (the scope of a suspension), off the request path.
func (e *Engine) SnapshotOf(p Principal) *Snapshot {
	pe := e.principals.get(p)
	if pe == nil {
		return nil
	}
	return pe.acct.snap
}

// PrincipalOf is the principal that admitted a live reservation.
func (e *Engine) PrincipalOf(r Reservation) (Principal, bool) {
	if rs := e.res.lookup(r); rs != nil {
		return rs.prin.who, true
	}
	return Principal{}, false
}

// Evidence returns the cell through which id's funding evidence is
// published, or nil if it has none.
func (e *Engine) Evidence(id AccountID) *EvidenceCell {
	if a := e.accounts[id]; a != nil {
		return a.evidence
	}
	return nil
}

// Standing returns what seed-000 admission reads of account id: its
// installed snapshot and its funding evidence cell (nil if none). It does
// not allocate: id is looked up as bytes.
func (e *Engine) Standing(id []byte) (*Snapshot, *EvidenceCell, bool) {
	a := e.accounts[AccountID(id)]
	if a == nil {
		return nil, nil, false
	}
	return a.snap, a.evidence, true
}
