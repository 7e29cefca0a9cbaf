// Package funding decides how an account's money reaches the shards that
// spend it: node leases from the ledger — acquired on demand, extended while
// the account is busy, handed back when it is idle — and slices of them for
// each shard that asks.
//
// It is a pure state machine in the style of etcd's raft: inputs are
// methods (a shard's refill request, units returned, usage settled, a
// ledger call's result, the time), and everything it wants done goes out
// through Out (a grant for a shard, a ledger call, evidence to publish).
// It reads no clock, does no I/O, and iterates nothing in random order, so
// a seeded simulator replays it exactly.
//
// Per node lease it keeps an exact account, checked at every release:
//
//	granted == pool + out + spent
//
// pool: here, not sliced; out: sliced to shards and neither spent nor
// returned; spent: usage settled against it. A lease is released only when
// out == 0, claiming exactly pool as unspent, so the ledger is never told
// a unit is unspent while a shard could still spend it.
//
// Ledger traffic follows demand, not requests: a lease is sized from the
// account's measured draw over the lease's lifetime, extended about once
// per RenewBefore while the account draws on it, and handed back once when
// it does not — after which an idle account causes no ledger call at all.
package funding

import (
	"container/heap"
	"math/bits"
	"slices"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/invariant"
)

// Config sets the funding policy. Times are nanoseconds; zero picks the
// default.
type Config struct {
	Shards int
	Holder string // this node's id, recorded on every lease it acquires

	TTL         int64 // a node lease's lifetime (60 s)
	RenewBefore int64 // extend, or hand back, this long before expiry (TTL/2)
	Margin      int64 // slices stop being usable this long before expiry (min(2 s, RenewBefore/4))

	MinLease core.CostUnits // the smallest lease asked for: an account that has not spent yet (10,000)
	MaxLease core.CostUnits // the largest (2^50)

	// A shard's slice adapts to its spending within [MinSlice, MaxSlice]:
	// doubled when the last one went within SliceFast, halved when it
	// lasted longer than SliceSlow.
	MinSlice, MaxSlice   core.CostUnits // 10,000 and 2^32
	SliceFast, SliceSlow int64          // 250 ms and 2 s

	// Retry is how long after a refusal or a failed call the machine waits
	// before asking the ledger again on its own (1 s), doubling while they
	// go on (up to 30 s). New funding (a deposit, a budget) asks at once,
	// and so does the ledger answering again after a failed call.
	Retry int64
	// Reclaim bounds how often the slices of one lease are asked back
	// from the shards to fund a starving one (10 ms).
	Reclaim int64
	// Recall bounds how often this node asks the other nodes of a fleet
	// for an account's units (10 ms).
	Recall int64
	// Wait is how long a shard holds a request waiting for funding (the
	// shards' funding wait, 200 ms): a want held back by Recall is sent
	// later only while a request may still wait for it.
	Wait int64
	// SiblingIdle: when an account's scope is exhausted while units of it
	// sit in the leases of sibling accounts on this node, a sibling's
	// lease not drawn on for this long is handed back for it (1 s).
	SiblingIdle int64
	// MaxCalls bounds ledger calls in flight; more wait here, in order
	// (256).
	MaxCalls int
}

func (c *Config) setDefaults() {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.TTL, 60e9)
	if c.RenewBefore <= 0 || c.RenewBefore >= c.TTL {
		c.RenewBefore = c.TTL / 2
	}
	if c.Margin <= 0 || c.Margin >= c.RenewBefore {
		c.Margin = min(2e9, c.RenewBefore/4)
	}
	if c.MinLease == 0 {
		c.MinLease = 10_000
	}
	if c.MaxLease < c.MinLease {
		c.MaxLease = max(c.MinLease, 1<<50)
	}
	if c.MinSlice == 0 {
		c.MinSlice = 10_000
	}
	if c.MaxSlice < c.MinSlice {
		c.MaxSlice = max(c.MinSlice, 1<<32)
	}
	def(&c.SliceFast, 250e6)
	def(&c.SliceSlow, 2e9)
	def(&c.Retry, 1e9)
	def(&c.Reclaim, 10e6)
	def(&c.SiblingIdle, 1e9)
	def(&c.Recall, 10e6)
	def(&c.Wait, 200e6)
	if c.MaxCalls <= 0 {
		c.MaxCalls = 256
	}
	if c.Shards <= 0 {
		c.Shards = 1
	}
}

// Out is what the machine asks of its shell.
type Out interface {
	// Grant queues a grant for shard; false means the shard's queue has no
	// room for grants now (the shard stays wanting and is served later).
	Grant(shard int, m message.Inbound) bool
	// Send queues a protocol message (a reclaim) for shard; it is never
	// dropped.
	Send(shard int, m message.Inbound)
	// Call runs a ledger call; its Result comes back through Done.
	Call(c Call)
	// Publish stores new funding evidence for account where shards read it.
	Publish(account core.AccountID, ev core.FundingEvidence)
	// Want asks the other nodes of a fleet to hand back what they hold
	// of account; Returned tells them this node released units of it.
	// Both are hints: one that is lost delays funding, and a client's
	// retry asks again.
	Want(account core.AccountID, holding core.CostUnits)
	Returned(account core.AccountID)
}

// CallKind names a ledger call.
type CallKind uint8

const (
	CallAcquire CallKind = iota + 1
	CallExtend
	CallRelease
)

func (k CallKind) String() string {
	switch k {
	case CallAcquire:
		return "acquire"
	case CallExtend:
		return "extend"
	case CallRelease:
		return "release"
	}
	return "call?"
}

// Call is one ledger call: Acquire(Account, holder, Want, Need, TTL, Now),
// Extend(Lease, Token, Want, Need, TTL, Now) or Release(Lease, Token,
// Unspent, Now).
type Call struct {
	ID           uint64
	Kind         CallKind
	Account      core.AccountID
	Holder       string
	Lease, Token uint64
	Want, Need   core.CostUnits
	Unspent      core.CostUnits
	TTL, Now     int64
}

// Outcome is what a ledger call came to, as the shell reads the ledger's
// answer.
type Outcome uint8

const (
	// OK: acquired or extended (Lease), or released.
	OK Outcome = iota
	// Refused: the ledger funds no grant now — a scope is exhausted or
	// cannot fund the need; Evidence says what is left.
	Refused
	// RefusedInactive: the account or an ancestor is suspended or closed.
	RefusedInactive
	// PeriodEnded: an extension refused because the lease's budget period
	// is over; the next lease takes the new period's allowance.
	PeriodEnded
	// Ended: a release found the lease no longer active (released
	// before, fenced, or unknown): nothing left to return.
	Ended
	// Invalid: the ledger refused the call's arguments — a bug here.
	Invalid
	// Failed: the call did not complete (the ledger is unreachable, a
	// timeout); it may be tried again.
	Failed
)

// Grant is the lease a grant answers with.
type Grant struct {
	ID, Token uint64
	Granted   core.CostUnits // in all, since the lease was acquired
	Used      core.CostUnits // usage the ledger has settled against it
	ExpiresAt int64
}

// Result is a Call's outcome.
type Result struct {
	ID          uint64
	Outcome     Outcome
	Lease       Grant
	Evidence    core.FundingEvidence // with a grant or a refusal (HasEvidence)
	HasEvidence bool
	Detail      string // what failed, for Invalid and Failed
}

// Stats counts what the machine did.
type Stats struct {
	Acquired, Extended, Released, Refused, Errors uint64
	HandedBack, SiblingsHandedBack, Rotated       uint64
	Grants, Reclaims                              uint64
	Wanted, Recalled                              uint64 // recalls asked of other nodes, and answered
}

// Machine is the funding state machine. It is not safe for concurrent use.
type Machine struct {
	cfg      Config
	out      Out
	accounts map[core.AccountID]*account
	order    []*account // install order: deterministic iteration
	under    map[core.AccountID][]*account
	calls    map[uint64]*pending
	waiting  []*pending // calls beyond MaxCalls, in order
	nextCall uint64
	timers   timerHeap
	timerSeq uint64
	// blocked[i] are accounts with a grant for shard i that found its
	// queue full; Drained(i) serves them again.
	blocked [][]*account
	// stuck is serve's scratch: the shards whose need the node cannot
	// fund from what it holds.
	stuck []int
	// unreleased are accounts with a release that failed and waits for
	// its back-off: the first answer the ledger gives again (ledgerBack)
	// releases them at once — a lease a live node held through an
	// outage is forfeited meanwhile, and its release, which restores it,
	// should not wait half a minute more. Bounded by the accounts.
	unreleased []*account
	// failing are accounts whose acquire or extend failed and waits for
	// its back-off (account.failing): the ledger's first answer asks for
	// them at once too. Bounded by the accounts.
	failing []*account
	// recalling are retired leases whose slices are not all back, by the
	// order they were retired in (retired counts retirements): see Recalled.
	recalling map[*lease]uint64
	retired   uint64
	// closing: HandBackAll ran (shutdown). No lease is asked for any
	// more, and one an acquire in flight then brings is handed back as
	// it arrives: nothing may stay out once the node has stopped.
	closing bool
	stats   Stats
}

// pending is a call in flight or waiting to be sent.
type pending struct {
	call  Call
	acct  *account
	lease *lease // extend, release
}

type account struct {
	id        core.AccountID
	scope     core.Scope
	ancestors []core.AccountID // parent first
	active    bool
	cur       *lease
	retiring  []*lease
	shards    []slice
	calling   bool           // an acquire or extend is in flight or waiting
	need      core.CostUnits // largest quote refused and not yet funded
	// recalledAt is when this node last handed the account's lease back
	// for another node (Recall), wantedAt when it last asked other nodes
	// for theirs: each at most once per Config.Recall.
	recalledAt, wantedAt int64
	wantAt               int64 // a want held back by Recall is due then (0: none)
	// yieldUntil: this node handed the lease back for another node that
	// asked; it asks the ledger for itself again only then, so the asker,
	// which hears of the release a little later, is not beaten to it.
	yieldUntil int64
	// verified: the ledger answered a call of this node's since the
	// evidence it holds came from elsewhere (Evidence): that evidence is
	// as exact as this node can know it.
	verified bool
	retryAt  int64
	backoff  int64 // nothingMore's and failedCall's current wait
	// failing: its last acquire or extend did not complete (Failed); it
	// is in Machine.failing until the ledger answers again.
	failing   bool
	lastDraw  int64          // last refill asked or usage settled
	spent     core.CostUnits // usage settled against its leases, ever
	markSpent core.CostUnits // spent at markAt
	markAt    int64
	rate      core.CostUnits // units per second, measured between calls
	reclaimAt int64
	gatherAt  int64 // a gather held back by Reclaim is due then (0: none)
	// still: nothing moved since the last reclaim — no shard returned
	// units, none was granted any. A gather that brought nothing is not
	// tried again for the same target (gatheredFor) until something moves;
	// for another target it asked the wrong slices (not the one the old
	// target held).
	still       bool
	gatheredFor int
	// ev is the ledger's latest evidence, as of spent == evSpent;
	// published is the Remaining the shards read now (lowered by
	// publishLocal as this node spends).
	ev    core.FundingEvidence
	hasEv bool
	evAt  int64 // when the ledger read behind ev began
	// estimate is what this node knew was left of the account when it
	// last heard from the ledger (as of spent == evSpent): the ledger's
	// Remaining, less this node's spending it had not yet been told of.
	estimate  core.CostUnits
	evSpent   core.CostUnits
	published core.CostUnits
	timerAt   int64 // the live timer entry's time; 0: none
}

type lease struct {
	id, token          uint64
	granted, pool, out core.CostUnits
	// outBy is out by shard: what each shard holds of it, unspent or in
	// reservations not yet settled.
	outBy                  []core.CostUnits
	spent                  core.CostUnits
	expires, renewedAt     int64
	short, retiring, asked bool
	// extending: an Extend of it is out. It is released only once the
	// answer is in: the ledger may grant more, and a release claiming
	// fewer unspent units than it holds would lose the rest.
	extending bool
	// retryAt and backoff: a failed release is asked again then.
	retryAt, backoff int64
}

// slice is the machine's view of one shard's slice of an account.
type slice struct {
	seq       uint64 // grants sent
	size      core.CostUnits
	lastGrant int64
	wants     bool
	needed    core.CostUnits
	// starved: its need went unfunded and it stopped waiting here
	// (stopWaiting); the next grant the ledger makes (revive) or news of
	// money (unblock) funds it again.
	starved bool
}

// New returns a machine that acts through out.
func New(cfg Config, out Out) *Machine {
	cfg.setDefaults()
	return &Machine{cfg: cfg, out: out, accounts: make(map[core.AccountID]*account),
		under: make(map[core.AccountID][]*account), calls: make(map[uint64]*pending),
		blocked: make([][]*account, cfg.Shards), recalling: make(map[*lease]uint64)}
}

// Retired is how many leases were retired so far: a mark for Recalled.
func (m *Machine) Retired() uint64 { return m.retired }

// Recalled reports whether every lease among the first mark retired has
// all its slices back from the shards: no shard can spend from them any
// more. A caller that must not answer before a debt stops its account
// (post-paid usage) waits for it.
func (m *Machine) Recalled(mark uint64) bool {
	for l, seq := range m.recalling {
		if seq <= mark && l.out > 0 {
			return false
		}
	}
	return true
}

// Stats returns the machine's counters.
func (m *Machine) Stats() Stats { return m.stats }

// Install tells the machine of an account the shards now know, or of a
// change of its standing (active: the account and every ancestor are
// active). An account that stops being active hands its lease back.
func (m *Machine) Install(id core.AccountID, scope core.Scope, ancestors []core.AccountID, active bool, now int64) {
	a := m.accounts[id]
	if a == nil {
		a = &account{id: id, scope: scope, ancestors: ancestors, shards: make([]slice, m.cfg.Shards)}
		m.accounts[id] = a
		m.order = append(m.order, a)
		for _, anc := range ancestors {
			m.under[anc] = append(m.under[anc], a)
		}
	}
	a.active = active
	if !active && a.cur != nil {
		m.handBack(a, a.cur, now)
	}
}

// Refill is shard from asking for funding for account id: the largest
// quote it refused was needed (0: it only crossed low water), and seq is
// the last grant it applied — older than the last one sent means the
// request was already answered.
func (m *Machine) Refill(from int, id core.AccountID, needed core.CostUnits, seq uint64, now int64) {
	a := m.accounts[id]
	if a == nil || from < 0 || from >= len(a.shards) {
		return
	}
	sl := &a.shards[from]
	if seq < sl.seq {
		return
	}
	// The shard's latest word on its need: the largest quote waiting
	// there, less what its slice holds.
	sl.wants, sl.needed = true, needed
	a.need = max(a.need, needed)
	a.lastDraw = now
	m.serve(a, now)
}

// Return takes back units of lease token that shard from did not spend.
func (m *Machine) Return(from int, id core.AccountID, token uint64, units core.CostUnits, now int64) {
	a, l := m.sliced(from, id, token, units)
	if l == nil {
		invariant.Violated(invariant.UnknownReturn, "units returned for a lease the plane did not slice them from")
		return
	}
	l.out -= units
	l.outBy[from] -= units
	l.pool += units
	a.still = false
	if sl := &a.shards[from]; sl.wants && sl.needed > 0 {
		sl.needed += units // its need was net of what it returned
	}
	if l.retiring {
		m.quiesced(a, l)
		return
	}
	// Units a shard's reservations released after a gather asked for them
	// (core.LeaseSlot.Reclaim) may fund the shards that stopped waiting:
	// they want again, with the need they had.
	m.revive(a)
	m.serve(a, now)
}

// sliced finds lease token of account id if shard from holds at least
// units of it (nil otherwise).
func (m *Machine) sliced(from int, id core.AccountID, token uint64, units core.CostUnits) (*account, *lease) {
	a := m.accounts[id]
	if a == nil || from < 0 || from >= m.cfg.Shards {
		return nil, nil
	}
	if l := a.lease(token); l != nil && units <= l.outBy[from] {
		return a, l
	}
	return a, nil
}

// Draw is the lease a usage event drew on, looked up once for both
// LeaseID and Settle (each usage record needs both, and the lookup is most
// of their cost). It is valid until the machine's next input.
type Draw struct {
	a *account
	l *lease
}

// Drawn finds the lease of account id with fencing token.
func (m *Machine) Drawn(id core.AccountID, token uint64) Draw {
	a := m.accounts[id]
	if a == nil {
		return Draw{}
	}
	return Draw{a: a, l: a.lease(token)}
}

// LeaseID is the ledger's id of the lease drawn on (0: none the plane holds).
func (d Draw) LeaseID() uint64 {
	if d.l == nil {
		return 0
	}
	return d.l.id
}

// Settle records usage that shard from billed against the lease d names.
func (m *Machine) Settle(from int, d Draw, units core.CostUnits, now int64) {
	a, l := d.a, d.l
	if l == nil || from < 0 || from >= len(l.outBy) || units > l.outBy[from] {
		invariant.Violated(invariant.UnknownSettle, "usage settled against a lease the plane does not hold")
		return
	}
	l.out -= units
	l.outBy[from] -= units
	l.spent += units
	a.spent += units
	a.lastDraw = now
	if l.retiring {
		m.quiesced(a, l)
	} else if l.short && m.publishLocal(a) {
		// Near exhaustion every unit spent is news to the requests
		// waiting here: what is left may no longer cover them (402).
		m.wakeStarving(a)
	}
}

// Evidence is new funding evidence for id from outside the machine (the
// provisioner's refresh after a deposit, a budget, post-paid usage): it is
// published, a refused account may ask again, and a lease holding more
// than the ledger says the account can spend — a debt appeared — is handed
// back, so its units repay the debt instead of being spent.
//
// readAt is when the ledger read began: evidence read before what the
// machine holds was read is stale (a refresh that started before a
// deposit and ended after it) and is ignored — published, it would refuse
// 402 a request the deposit pays for.
func (m *Machine) Evidence(id core.AccountID, ev core.FundingEvidence, readAt, now int64) {
	if len(m.unreleased) > 0 || len(m.failing) > 0 {
		m.ledgerBack(now) // the ledger answered the refresh
	}
	a := m.accounts[id]
	if a == nil || readAt < a.evAt {
		return
	}
	// Only more money, or another scope or period, is news that may let a
	// refused account's next call succeed: a fleet republishes evidence
	// whenever anyone under the same org settles, and resetting the
	// back-off on each would turn every refresh into a ledger call per
	// exhausted account. More money is more than the ledger said last,
	// or more than this node knows is left: the ledger's Remaining counts
	// this node's unexported spending and falls as the exporter catches
	// up, so a deposit may arrive as a Remaining below the last one.
	news := !a.hasEv || ev.Remaining > a.ev.Remaining || ev.Remaining > m.local(a) || ev.Scope != a.ev.Scope ||
		ev.PeriodEnd != a.ev.PeriodEnd || ev.Period != a.ev.Period ||
		ev.ResetAt != a.ev.ResetAt || ev.Next > a.ev.Next
	local := ev.Remaining
	if !news {
		// No more money: it can only tell of less. This node's own view
		// (local) knows its own spending, which the ledger counts only
		// once it is exported; both are upper bounds, and the lower is
		// kept.
		local = min(local, m.local(a))
	}
	lower := a.hasEv && local < a.published
	m.publish(a, ev, local, readAt)
	if news {
		// More money, as the ledger counts it: it may count this node's
		// spending as still unspent.
		a.verified = false
	}
	if news {
		a.retryAt, a.backoff = 0, 0
		m.revive(a)
	} else if lower {
		// Less is left than the waiting requests were told: the ones it
		// no longer covers are refused 402 now, not at their deadline.
		m.wakeStarving(a)
	}
	if l := a.cur; l != nil && ev.Remaining < l.pool+l.out {
		m.handBack(a, l, now)
	}
	if a.wanting() {
		m.ensureCall(a, now)
	}
}

// HandBackAll retires every lease, for shutdown: each is released once the
// shards have returned their slices.
func (m *Machine) HandBackAll(now int64) {
	m.closing = true
	for _, a := range m.order {
		if a.cur != nil {
			m.handBack(a, a.cur, now)
		}
	}
}

// Quiet reports whether the machine holds no lease and has no call in
// flight.
func (m *Machine) Quiet() bool {
	if len(m.calls) > 0 || len(m.waiting) > 0 {
		return false
	}
	for _, a := range m.order {
		if a.cur != nil || len(a.retiring) > 0 {
			return false
		}
	}
	return true
}

// Holding reports the units this node holds for id: in its leases' pools
// and in shards' slices, not yet spent — its own leases' and those of
// every account under it. A descendant's lease is paid by each metered
// ancestor (ledger: every funder of the chain pays the grant and is
// credited the unspent units back), so for them it is held too. For an
// unmetered account, which funds nothing, the ledger's outstanding (0)
// bounds what the admin API shows.
func (m *Machine) Holding(id core.AccountID) core.CostUnits {
	var h core.CostUnits
	if a := m.accounts[id]; a != nil {
		h += a.holding()
	}
	for _, b := range m.under[id] {
		h += b.holding()
	}
	return h
}

// holding is what a's own leases hold unspent.
func (a *account) holding() core.CostUnits {
	var h core.CostUnits
	if a.cur != nil {
		h += a.cur.pool + a.cur.out
	}
	for _, l := range a.retiring {
		h += l.pool + l.out
	}
	return h
}

// Drained is told that shard i's queue has room for grants again.
func (m *Machine) Drained(i int, now int64) {
	if i < 0 || i >= len(m.blocked) || len(m.blocked[i]) == 0 {
		return
	}
	waiting := m.blocked[i]
	m.blocked[i] = nil
	for _, a := range waiting {
		m.serve(a, now)
	}
}

// Next is the earliest time Tick has work (0: none).
func (m *Machine) Next() int64 {
	for len(m.timers) > 0 {
		t := m.timers[0]
		if t.acct.timerAt == t.at {
			return t.at
		}
		heap.Pop(&m.timers) // superseded
	}
	return 0
}

// Tick runs what is due at now: leases to extend or hand back, retries.
func (m *Machine) Tick(now int64) {
	for len(m.timers) > 0 && m.timers[0].at <= now {
		t := heap.Pop(&m.timers).(timer)
		a := t.acct
		if a.timerAt != t.at {
			continue // superseded
		}
		a.timerAt = 0
		m.due(a, now)
	}
}

// due handles an account whose timer fired.
func (m *Machine) due(a *account, now int64) {
	for _, l := range a.retiring {
		switch {
		case l.out > 0:
			m.askBack(a, l) // a shard could not retire it at once: ask again
		case !l.asked && now >= l.retryAt:
			m.quiesced(a, l) // its release failed: again
		}
	}
	if l := a.cur; l != nil && now >= l.expires-m.cfg.RenewBefore {
		if a.lastDraw > l.renewedAt {
			m.ensureCall(a, now) // busy: extend
		} else {
			m.handBack(a, l, now) // idle since its last renewal
		}
	}
	if a.gatherAt != 0 && now >= a.gatherAt {
		a.gatherAt = 0
		m.serve(a, now)
	}
	if a.yieldUntil != 0 && now >= a.yieldUntil {
		a.yieldUntil = 0
		m.unblock(a, now)
	}
	if a.wantAt != 0 && now >= a.wantAt {
		a.wantAt = 0
		if a.starving() {
			m.want(a, now)
		}
	}
	if a.wanting() {
		m.ensureCall(a, now)
	}
	m.arm(a, now)
}

// arm sets a's timer to the next time it needs a look: its lease's renewal
// (not before a refusal's retry time), a retry while shards want funding,
// or a re-ask of retiring leases whose slices have not all come back. An
// account with a call in flight is re-armed when the call is done.
func (m *Machine) arm(a *account, now int64) {
	if a.calling {
		return
	}
	var at int64
	if l := a.cur; l != nil {
		at = max(l.expires-m.cfg.RenewBefore, a.retryAt)
	}
	if a.wanting() && a.retryAt > now && (at == 0 || a.retryAt < at) {
		at = a.retryAt
	}
	if len(a.retiring) > 0 {
		// A re-ask of slices not all back, or of a release that failed:
		// after Retry, or its release's back-off.
		next := now + m.cfg.Retry
		for _, l := range a.retiring {
			if l.retryAt > now {
				next = max(next, l.retryAt)
			}
		}
		if at == 0 || next < at {
			at = next
		}
	}
	if a.gatherAt != 0 && (at == 0 || a.gatherAt < at) {
		at = a.gatherAt
	}
	if a.wantAt != 0 && (at == 0 || a.wantAt < at) {
		at = a.wantAt
	}
	if a.yieldUntil != 0 && (at == 0 || a.yieldUntil < at) {
		at = a.yieldUntil
	}
	if at == 0 || at == a.timerAt {
		return
	}
	at = max(at, now+1)
	a.timerAt = at
	m.timerSeq++
	heap.Push(&m.timers, timer{at: at, seq: m.timerSeq, acct: a})
}

func (a *account) lease(token uint64) *lease {
	if token == 0 {
		return nil
	}
	if a.cur != nil && a.cur.token == token {
		return a.cur
	}
	for _, l := range a.retiring {
		if l.token == token {
			return l
		}
	}
	return nil
}

// wanting reports whether some shard asked for funding not yet sent.
func (a *account) wanting() bool {
	for i := range a.shards {
		if a.shards[i].wants {
			return true
		}
	}
	return false
}

// serve grants slices of the current lease to the shards that want them,
// and asks the ledger for more when the lease runs low, cannot fund a
// wanting shard, or nears its renewal.
//
// Money that exists is spendable (docs/INVARIANTS.md, funding liveness):
// while the ledger has no more for this node (its lease is short, or it
// refused or failed lately: dry), a shard whose need the pool cannot
// cover is served from what the node holds. If the pool and the other
// shards' slices together cover it, they are asked back (gathered) and
// the shard is granted once they return; if not, the shard gets what the
// pool has — smaller requests there can be funded — and the evidence the
// shards read is lowered to what this node knows is left, so a request
// that cannot be paid is refused 402 at once instead of waiting.
func (m *Machine) serve(a *account, now int64) {
	l := a.cur
	if l == nil || now >= l.expires-m.cfg.Margin {
		if a.wanting() {
			m.ensureCall(a, now)
			if now < a.retryAt { // no lease, and the ledger refused lately
				m.stuck = m.stuck[:0]
				var need core.CostUnits
				for i := range a.shards {
					if sl := &a.shards[i]; sl.wants {
						m.stuck = append(m.stuck, i)
						need = max(need, m.realNeed(a, i))
					}
				}
				m.cannotFund(a, need, now)
			}
		}
		m.arm(a, now)
		return
	}
	if l.short || now < a.retryAt {
		m.serveDry(a, l, now)
		m.arm(a, now)
		return
	}
	starving := false
	for i := range a.shards {
		sl := &a.shards[i]
		if !sl.wants {
			continue
		}
		sl.needed = m.realNeed(a, i)
		size := m.nextSize(sl, now)
		units := m.sliceOf(a, l, sl, size)
		if units == 0 || units < sl.needed {
			starving = true // the ledger may have more: ask it
			continue
		}
		m.grant(a, l, i, units, size, now)
	}
	if !a.wanting() {
		a.need = 0
	}
	if starving || l.pool < max(a.need, l.granted/4) {
		m.ensureCall(a, now)
	}
	m.arm(a, now)
}

// serveDry serves the shards that want funding while the ledger has no
// more for this node: what the node holds is all there is. Shards whose
// need the pool covers are granted; of the others, the one with the
// smallest need is the target (see betterTarget: a real need first, and
// one the node's units cover first): the other shards' slices are asked back
// (gathered) for it while the pool and those slices cover its need, and
// nothing goes to the rest meanwhile — partial slices would keep each of
// them short. If nothing the node holds can cover it, the pool goes to it
// as it is (smaller requests there may fit), and the shards left wanting
// stop waiting here (cannotFund).
func (m *Machine) serveDry(a *account, l *lease, now int64) {
	target, need := -1, core.CostUnits(0)
	for i := range a.shards {
		sl := &a.shards[i]
		if !sl.wants {
			continue
		}
		sl.needed = m.realNeed(a, i)
		size := m.nextSize(sl, now)
		if units := m.sliceOf(a, l, sl, size); units > 0 && units >= sl.needed {
			m.grant(a, l, i, units, size, now)
			continue
		}
		if target < 0 || betterTarget(a, l, i, target) {
			target = i
		}
		need = max(need, sl.needed)
	}
	if !a.wanting() {
		a.need = 0
	}
	if target < 0 {
		return
	}
	// A gather whose answers are all in and brought nothing found the
	// units in reservations, not in slices: it is not asked again for the
	// same target until something moves (a return or a grant). What those reservations
	// release comes back unasked (core.LeaseSlot.Reclaim) as a return.
	fruitless := a.reclaimAt != 0 && now-a.reclaimAt >= m.cfg.Reclaim && a.still && a.gatheredFor == target
	elsewhere := l.out - l.outBy[target]
	if tn := max(a.shards[target].needed, 1); !fruitless && elsewhere > 0 && l.pool+elsewhere >= tn {
		m.reclaimSlices(a, l, target, now)
		return
	}
	m.stuck = m.stuck[:0]
	for i := range a.shards {
		if a.shards[i].wants {
			m.stuck = append(m.stuck, i)
		}
	}
	if sl := &a.shards[target]; l.pool > 0 {
		m.grant(a, l, target, l.pool, m.nextSize(sl, now), now)
	}
	m.ensureCall(a, now)
	m.cannotFund(a, need, now)
}

// betterTarget reports whether shard i is a better target for serveDry's
// gather than shard than. A real need comes before a shard only at low
// water (need 0: no request waits there, and its slice may hold the very
// units a waiting request needs); then a need the node's units cover once
// gathered (the pool and the other shards' slices) before one they cannot;
// then the smaller need. Needs are net of the shard's own slice, so the
// smallest need alone may name a shard nothing can fund while another
// could be.
func betterTarget(a *account, l *lease, i, than int) bool {
	ni, nt := a.shards[i].needed, a.shards[than].needed
	if (ni == 0) != (nt == 0) {
		return nt == 0
	}
	if gi, gt := gatherable(l, i, ni), gatherable(l, than, nt); gi != gt {
		return gi
	}
	return ni < nt
}

// gatherable reports whether the pool and the slices of l other shards
// than i hold need (at least one unit).
func gatherable(l *lease, i int, need core.CostUnits) bool {
	return l.pool+l.out-l.outBy[i] >= max(need, 1)
}

// cannotFund follows a serve that left shards needing more than this node
// holds, while the ledger has no more for it. If the evidence the shards
// read does not rule the need out and came from elsewhere (a refresh
// after an export counts this node's spending only once it is exported),
// one call to the ledger — whatever the back-off — brings evidence as
// exact as this node can know, and its answer lets the waiting requests be
// funded or refused 402. Otherwise their wait ends now (stopWaiting).
func (m *Machine) cannotFund(a *account, need core.CostUnits, now int64) {
	if a.calling {
		return // its answer serves them
	}
	if !a.verified && a.hasEv && need > 0 && need <= a.published && a.active {
		m.callLedger(a, now)
		return
	}
	if a.hasEv && need > 0 && need <= a.published {
		// The ledger has just said the units exist, and it has none to
		// grant: other nodes hold them in their leases. Ask them to
		// hand them back; their release's announcement (Returned) asks
		// the ledger again for the shards that stop waiting here.
		m.want(a, now)
	}
	m.stopWaiting(a)
}

// want asks the other nodes for a's units, at most once per Recall; one
// held back is sent when Recall has passed, as long as a request may still
// be waiting here (Config.Wait since the last refill asked).
func (m *Machine) want(a *account, now int64) {
	if now-a.wantedAt < m.cfg.Recall && a.wantedAt != 0 {
		if now-a.lastDraw < m.cfg.Wait {
			a.wantAt = a.wantedAt + m.cfg.Recall
		}
		return
	}
	a.wantedAt, a.wantAt = now, 0
	m.stats.Wanted++
	m.out.Want(a.id, a.holding())
}

// Recall is node from, which holds holding units of id, asking for the
// units this node holds of it: the ledger refused it while they sit in
// this node's lease. The lease is handed back (at most once per
// Config.Recall per account) and the shards that want funding here take a
// new one, sized by what is left — unless this node is starving for the
// account too and holds more (ties go to the smaller holder name): then it
// keeps them and the asker, hearing its own want, hands its units back to
// it. So when several nodes starve for the last units, they converge on
// one of them instead of trading halves.
func (m *Machine) Recall(id core.AccountID, from string, holding core.CostUnits, now int64) {
	a := m.accounts[id]
	if a == nil || a.cur == nil {
		return
	}
	a.recalledAt, a.yieldUntil = now, now+m.cfg.Recall
	m.stats.Recalled++
	m.handBack(a, a.cur, now)
	m.arm(a, now)
}

// Returned is another node saying it released units of id to the ledger:
// shards that stopped waiting for funding here may be funded now.
func (m *Machine) Returned(id core.AccountID, now int64) {
	if a := m.accounts[id]; a != nil {
		m.unblock(a, now)
	}
}

// realNeed is shard i's need as the evidence allows it. The shard's word
// on its need is the largest quote it refused since its last grant, net of
// what its slice holds, and it lags until that grant: the request behind
// it may have been refused 402 since the evidence was lowered, while a
// smaller one waits. No quote the account can pay needs more than the
// evidence leaves beyond what the shard's slice of the current lease
// already holds, so a larger need is cut to that (a waiting request keeps
// a need of at least one unit). Left uncut, a need of units that do not
// exist would make the units that do — the pool and the other shards'
// slices — look too few to gather for it, and the request they pay for
// would wait for funding that never comes.
func (m *Machine) realNeed(a *account, i int) core.CostUnits {
	sl := &a.shards[i]
	if !a.hasEv || sl.needed == 0 {
		return sl.needed
	}
	var held core.CostUnits
	if l := a.cur; l != nil {
		held = l.outBy[i]
	}
	return min(sl.needed, max(a.published-min(a.published, held), 1))
}

// grant sends shard i a slice of units of l (of size, for its next size).
func (m *Machine) grant(a *account, l *lease, i int, units, size core.CostUnits, now int64) {
	sl := &a.shards[i]
	g := message.Inbound{Kind: message.InGrant, Account: a.id, Token: l.token, Units: units,
		Until: l.expires - m.cfg.Margin, LowWater: units / 2, Seq: sl.seq + 1}
	if !m.out.Grant(i, g) {
		m.blocked[i] = append(m.blocked[i], a) // it stays wanting
		return
	}
	sl.seq++
	sl.wants, sl.needed, sl.lastGrant, sl.size = false, 0, now, size
	a.still = false
	l.pool -= units
	l.out += units
	l.outBy[i] += units
	sl.starved = false
	m.stats.Grants++
}

// stopWaiting ends the wait of the shards whose need this node cannot
// fund now (m.stuck): their requests are told what is left
// (publishLocal), and those it does not cover are refused 402; the others
// ask again. The next news of money (unblock) asks the ledger for them.
func (m *Machine) stopWaiting(a *account) {
	lowered := m.publishLocal(a)
	for _, i := range m.stuck {
		if sl := &a.shards[i]; sl.wants {
			sl.wants, sl.starved = false, true
			if lowered {
				// Evidence is read without a message: this one wakes the
				// shard's loop to run its waiting requests again. (Only
				// news: a wake-up that changes nothing would send them
				// straight back here.)
				m.out.Send(i, message.Inbound{Kind: message.InFundingNews, Account: a.id})
			}
		}
	}
}

// wakeStarving sends the shards that stopped waiting for a's funding a
// message that runs their waiting requests again (evidence is read
// without one).
func (m *Machine) wakeStarving(a *account) {
	for i := range a.shards {
		if sl := &a.shards[i]; sl.starved || sl.wants {
			m.out.Send(i, message.Inbound{Kind: message.InFundingNews, Account: a.id})
		}
	}
}

// revive makes the shards that stopped waiting want again, with the need
// they had: the ledger has granted (or money has arrived) since.
func (m *Machine) revive(a *account) {
	for i := range a.shards {
		if sl := &a.shards[i]; sl.starved {
			sl.wants, sl.starved = true, false
			a.need = max(a.need, sl.needed)
		}
	}
}

// starving reports whether a shard of a stopped waiting for funding.
func (a *account) starving() bool {
	for i := range a.shards {
		if a.shards[i].starved {
			return true
		}
	}
	return false
}

// publish records the ledger's evidence ev, read at readAt, and this
// node's estimate of what is left, local (as of what it has spent now),
// and hands the estimate to the shards.
func (m *Machine) publish(a *account, ev core.FundingEvidence, local core.CostUnits, readAt int64) {
	a.ev, a.hasEv, a.evSpent, a.evAt = ev, true, a.spent, readAt
	a.estimate, a.published = local, local
	ev.Remaining = local
	m.out.Publish(a.id, ev)
}

// local is what this node knows is left of a: its estimate when it last
// heard from the ledger, less what it has spent since.
func (m *Machine) local(a *account) core.CostUnits {
	return a.estimate - min(a.estimate, a.spent-a.evSpent)
}

// publishLocal lowers the evidence the shards read by what this node has
// spent since the ledger gave it: the ledger's Remaining counted those
// units as still out in a lease. It stays an upper bound on what the
// account can spend (other nodes may have spent too), so it never refuses
// a fundable quote; on one node it is exact.
// It reports whether it lowered anything.
func (m *Machine) publishLocal(a *account) bool {
	if !a.hasEv {
		return false
	}
	ev := a.ev
	ev.Remaining = m.local(a)
	if ev.Remaining >= a.published {
		return false
	}
	a.published = ev.Remaining
	m.out.Publish(a.id, ev)
	return true
}

// nextSize is a shard's next slice size: doubled when its last slice went
// within SliceFast, halved when it lasted over SliceSlow. It changes
// nothing: only a grant made at that size becomes the shard's size, so a
// starving shard asking again and again does not inflate it.
func (m *Machine) nextSize(sl *slice, now int64) core.CostUnits {
	s := sl.size
	switch since := now - sl.lastGrant; {
	case s == 0:
		s = m.cfg.MinSlice
	case since < m.cfg.SliceFast:
		s = min(2*s, m.cfg.MaxSlice)
	case since > m.cfg.SliceSlow:
		s = max(s/2, m.cfg.MinSlice)
	}
	return s
}

// sliceOf is what a shard gets of l at size: at most a fair share of a
// short lease, at least the quote it needs, at most the pool.
func (m *Machine) sliceOf(a *account, l *lease, sl *slice, size core.CostUnits) core.CostUnits {
	s := size
	if l.short {
		// Near exhaustion the lease is all there is: split what is left
		// of it over the shards, so the first to ask does not hold all
		// of it.
		s = min(s, max((l.pool+l.out)/core.CostUnits(len(a.shards)), 1))
	}
	s = max(s, sl.needed)
	return min(s, l.pool)
}

// reclaimSlices asks every shard but target holding units of l to hand
// back what it has not spent, so that target can be funded from the
// returns; at most once per Reclaim per account (a gather held back is
// retried then). A shard hands back only after it has run the requests
// waiting for its funding, so a slice just granted for a waiting quote
// funds it before it can be asked back.
func (m *Machine) reclaimSlices(a *account, l *lease, target int, now int64) {
	if now-a.reclaimAt < m.cfg.Reclaim && a.reclaimAt != 0 {
		a.gatherAt = a.reclaimAt + m.cfg.Reclaim // serve again then (due)
		return
	}
	// The answers are in well within Reclaim: look again then, whatever
	// they brought (a shard with nothing to give answers nothing).
	a.reclaimAt, a.gatherAt, a.still, a.gatheredFor = now, now+m.cfg.Reclaim, true, target
	m.stats.Reclaims++
	for i, out := range l.outBy {
		if out > 0 && i != target {
			m.out.Send(i, message.Inbound{Kind: message.InReclaimLease, Account: a.id, Token: l.token})
		}
	}
}

// ensureCall asks the ledger for funding for a: a new lease when it holds
// none (or its lease is past use), else an extension of the current one.
// One such call per account at a time, none while a refusal is recent.
func (m *Machine) ensureCall(a *account, now int64) {
	if now < a.retryAt {
		return
	}
	m.callLedger(a, now)
}

// callLedger is ensureCall without the back-off.
func (m *Machine) callLedger(a *account, now int64) {
	if a.calling || !a.active || m.closing || now < a.yieldUntil {
		return
	}
	if l := a.cur; l != nil && now >= l.expires {
		m.handBack(a, l, now) // dead: the ledger forfeits what was not returned in time
	}
	target := m.target(a, now)
	c := Call{Account: a.id, Want: target, Need: a.need, TTL: m.cfg.TTL, Now: now}
	var l *lease
	if a.cur == nil {
		c.Kind, c.Holder = CallAcquire, m.cfg.Holder
	} else {
		l = a.cur
		c.Kind, c.Lease, c.Token = CallExtend, l.id, l.token
		// Top the lease up to its target, and at least to what the shards
		// waiting for a slice would take now.
		held := l.pool + l.out
		c.Want, c.Need = 0, 0
		if target > held {
			c.Want = target - held
		}
		if w := m.wanted(a, now); w > l.pool {
			c.Want = max(c.Want, w-l.pool)
		}
		if a.need > l.pool {
			c.Need = a.need - l.pool
		}
	}
	if l != nil && c.Want == 0 && c.Need == 0 && now < l.expires-m.cfg.RenewBefore {
		return // it would ask for nothing, and it is not yet time to renew
	}
	a.calling = true
	if l != nil {
		l.extending = true
	}
	m.call(&pending{call: c, acct: a, lease: l})
}

// wanted is what the shards waiting for a slice of a would take now.
func (m *Machine) wanted(a *account, now int64) core.CostUnits {
	var w core.CostUnits
	for i := range a.shards {
		if sl := &a.shards[i]; sl.wants {
			w += max(m.nextSize(sl, now), sl.needed)
		}
	}
	return w
}

// target sizes a lease from the account's spending (usage settled, not
// slices handed out, which run ahead of it): enough for a whole TTL at the
// rate measured since the last call (over at least window; the rate decays
// by half per call when spending slows), never below MinLease nor four
// times the quote waiting, never above MaxLease.
func (m *Machine) target(a *account, now int64) core.CostUnits {
	const window = 10e6
	if elapsed := now - a.markAt; a.markAt != 0 && elapsed >= window {
		a.rate = max(perSecond(a.spent-a.markSpent, elapsed), a.rate/2)
		a.markAt, a.markSpent = now, a.spent
	} else if a.markAt == 0 {
		a.markAt, a.markSpent = now, a.spent
	}
	t := max(scale(a.rate, m.cfg.TTL), m.cfg.MinLease, 4*a.need)
	return min(t, m.cfg.MaxLease)
}

// perSecond is units drawn over elapsed ns, per second, saturating.
func perSecond(units core.CostUnits, elapsed int64) core.CostUnits {
	hi, lo := bits.Mul64(uint64(units), 1e9)
	if hi >= uint64(elapsed) {
		return core.MaxCostUnits
	}
	q, _ := bits.Div64(hi, lo, uint64(elapsed))
	return core.CostUnits(q)
}

// scale is rate (per second) over d ns, saturating.
func scale(rate core.CostUnits, d int64) core.CostUnits {
	hi, lo := bits.Mul64(uint64(rate), uint64(d))
	if hi >= 1e9 {
		return core.MaxCostUnits
	}
	q, _ := bits.Div64(hi, lo, 1e9)
	return core.CostUnits(q)
}

// call sends c now, or queues it behind MaxCalls calls in flight.
func (m *Machine) call(p *pending) {
	m.nextCall++
	p.call.ID = m.nextCall
	if len(m.calls) >= m.cfg.MaxCalls {
		m.waiting = append(m.waiting, p)
		return
	}
	m.calls[p.call.ID] = p
	m.out.Call(p.call)
}

// handBack retires l: it stops funding new slices, every shard is asked for
// what it holds of it, and it is released once they all came back.
func (m *Machine) handBack(a *account, l *lease, now int64) {
	if l.retiring {
		return
	}
	l.retiring = true
	if a.cur == l {
		a.cur = nil
	}
	a.retiring = append(a.retiring, l)
	m.stats.HandedBack++
	m.retired++
	if l.out == 0 {
		m.quiesced(a, l)
		return
	}
	m.recalling[l] = m.retired
	m.askBack(a, l)
	m.arm(a, now)
}

// askBack asks every shard that ever held a slice of a for what it holds of
// the retired lease l.
func (m *Machine) askBack(a *account, l *lease) {
	for i := range a.shards {
		if a.shards[i].seq > 0 {
			m.out.Send(i, message.Inbound{Kind: message.InRetireLease, Account: a.id, Token: l.token})
		}
	}
}

// quiesced releases a retired lease whose slices have all come back.
func (m *Machine) quiesced(a *account, l *lease) {
	if l.out != 0 || l.asked || l.extending {
		return
	}
	delete(m.recalling, l)
	if l.pool+l.spent != l.granted {
		invariant.Violated(invariant.LeaseBooks, "a quiescent node lease's pool + spent != granted")
	}
	l.asked = true
	m.call(&pending{call: Call{Kind: CallRelease, Account: a.id, Lease: l.id, Token: l.token, Unspent: l.pool}, acct: a, lease: l})
}

// Done applies a ledger call's result.
func (m *Machine) Done(r Result, now int64) {
	if p := m.calls[r.ID]; p != nil {
	}
	p := m.calls[r.ID]
	if p == nil {
		return
	}
	delete(m.calls, r.ID)
	for len(m.waiting) > 0 && len(m.calls) < m.cfg.MaxCalls {
		next := m.waiting[0]
		m.waiting = m.waiting[1:]
		next.call.Now = now
		m.calls[next.call.ID] = next
		m.out.Call(next.call)
	}
	a := p.acct
	if r.Outcome != Failed {
		if p.call.Kind != CallRelease {
			a.failing = false // this answer is its own: no need to wake it
		}
		if len(m.unreleased) > 0 || len(m.failing) > 0 {
			m.ledgerBack(now)
		}
	}
	if r.HasEvidence {
		ev := r.Evidence
		if p.call.Now >= a.evAt {
			local := ev.Remaining
			if l := p.lease; l != nil && p.call.Kind == CallExtend && r.Outcome == OK {
				// The ledger counts as outstanding what this node has
				// spent but not yet exported (its Used lags the spool):
				// what the account can still spend is that much less.
				lag := l.spent - min(r.Lease.Used, l.spent)
				local -= min(local, lag)
			}
			m.publish(a, ev, local, p.call.Now)
		}
	}
	switch p.call.Kind {
	case CallRelease:
		m.released(a, p.lease, r, now)
	case CallAcquire:
		a.calling, a.verified = false, true
		m.acquired(a, p.call, r, now)
	case CallExtend:
		a.calling, a.verified = false, true
		m.extended(a, p.lease, p.call, r, now)
	default:
		invariant.Violated(invariant.UnknownKind, "a ledger result for a call of kind "+p.call.Kind.String())
	}
	m.arm(a, now)
}

func (m *Machine) released(a *account, l *lease, r Result, now int64) {
	if r.Outcome != OK {
		m.stats.Errors++
		switch r.Outcome {
		case Invalid:
			invariant.Violated(invariant.LedgerRefusedRelease, r.Detail)
		case Ended:
			// Released before, or fenced by a newer incarnation: nothing
			// left to return.
		default:
			// Not released: the units must still go back. Try again after
			// Retry, doubling while it keeps failing (a ledger out of
			// reach for a minute costs a few calls, not sixty), up to
			// maxBackoff (due re-asks a retiring lease that has none out).
			l.asked = false
			l.backoff = min(max(2*l.backoff, m.cfg.Retry), maxBackoff)
			l.retryAt = now + l.backoff
			if !slices.Contains(m.unreleased, a) {
				m.unreleased = append(m.unreleased, a)
			}
			m.arm(a, now)
			return
		}
	}
	for i, x := range a.retiring {
		if x == l {
			a.retiring = append(a.retiring[:i], a.retiring[i+1:]...)
			break
		}
	}
	if r.Outcome != OK {
		return
	}
	m.stats.Released++
	if l.pool > 0 {
		m.out.Returned(a.id) // other nodes may be waiting for them
	}
	// Its units are back in the balance: accounts refused for want of them
	// may ask again — this one, and any under the same scopes.
	m.unblock(a, now)
	for _, anc := range a.ancestors {
		for _, b := range m.under[anc] {
			m.unblock(b, now)
		}
	}
}

// ledgerBack releases at once the leases whose release failed and waits
// for its back-off, and lets the accounts whose acquire or extend failed
// ask again now: the ledger answers again.
func (m *Machine) ledgerBack(now int64) {
	accounts := m.unreleased
	m.unreleased = nil
	for _, a := range accounts {
		for _, l := range a.retiring {
			if !l.asked && l.retryAt > now {
				l.retryAt, l.backoff = 0, 0
				m.quiesced(a, l)
			}
		}
	}
	accounts = m.failing
	m.failing = nil
	for _, a := range accounts {
		if a.failing {
			a.failing = false
			m.unblock(a, now)
			m.arm(a, now)
		}
	}
}

// unblock lets a refused account that still wants funding, or whose
// shards stopped waiting for it lately, ask again now.
func (m *Machine) unblock(a *account, now int64) {
	if now < a.yieldUntil {
		return // due asks then
	}
	if a.wanting() || a.starving() {
		a.retryAt, a.backoff = 0, 0
		m.revive(a)
		m.ensureCall(a, now)
		return
	}
	if a.retryAt > now {
		a.retryAt, a.backoff = 0, 0
	}
}

func (m *Machine) acquired(a *account, c Call, r Result, now int64) {
	if r.Outcome != OK {
		m.refused(a, r, now)
		return
	}
	m.stats.Acquired++
	a.backoff = 0
	g := r.Lease.Granted
	// Granted less than asked: the account is near exhaustion. Slice it
	// fairly, and ask for more only when a shard starves, not at low water
	// (that would split a small balance into ever smaller leases).
	l := &lease{id: r.Lease.ID, token: r.Lease.Token, granted: g, pool: g, expires: r.Lease.ExpiresAt,
		renewedAt: now, short: g < c.Want, outBy: make([]core.CostUnits, m.cfg.Shards)}
	if !a.active || m.closing {
		a.cur = l
		m.handBack(a, l, now)
		return
	}
	a.cur = l
	m.revive(a)
	m.serve(a, now)
}

func (m *Machine) extended(a *account, l *lease, c Call, r Result, now int64) {
	l.extending = false
	if l != a.cur {
		// Retired meanwhile: what the ledger added is in the lease all
		// the same, and goes back with its release, which waited for
		// this answer.
		if r.Outcome == OK && r.Lease.Granted > l.granted {
			added := r.Lease.Granted - l.granted
			l.granted += added
			l.pool += added
		}
		m.quiesced(a, l)
		return
	}
	switch r.Outcome {
	case Refused, RefusedInactive:
		m.stats.Refused++
		m.handBack(a, l, now) // suspended or closed: stop using it
		return
	case PeriodEnded:
		// A new budget period: the next lease takes its allowance; this
		// one returns what it holds to the period it came from.
		m.stats.Rotated++
		m.handBack(a, l, now)
		m.ensureCall(a, now)
		return
	case OK:
	default:
		m.failedCall(a, r, now)
		return
	}
	m.stats.Extended++
	added := r.Lease.Granted - min(l.granted, r.Lease.Granted)
	l.granted += added
	l.pool += added
	l.renewedAt = now
	if r.Lease.ExpiresAt > l.expires {
		l.expires = r.Lease.ExpiresAt
		// Slices carry the time they stop being usable: move it for every
		// shard that holds one, or they would stop at the old expiry.
		for i := range a.shards {
			if a.shards[i].seq > 0 {
				m.out.Send(i, message.Inbound{Kind: message.InExtendLease, Account: a.id, Token: l.token, Until: l.expires - m.cfg.Margin})
			}
		}
	}
	l.short = added < c.Want
	if added == 0 && c.Want > 0 {
		if a.wanting() && m.siblings(a, now) {
			// A sibling's lease is on its way back to the scope: the
			// shards keep waiting, and its release asks again (unblock).
			a.retryAt = now + m.cfg.Retry
			return
		}
		m.nothingMore(a, now)
		return
	}
	a.backoff = 0
	m.revive(a)
	m.serve(a, now)
}

// nothingMore follows a ledger answer that funded nothing: the evidence it
// published answers the waiting requests (402 when it shows the quote out
// of reach), and the machine does not ask the ledger again before a
// backoff (Retry, doubling to maxBackoff) unless news arrives: a deposit, a
// budget, a release of units here (Evidence, unblock). Meanwhile what the
// node holds is all there is: serve gathers it for the starving shards or
// ends their wait. Without the backoff a client hammering an exhausted
// account would cost a ledger transaction per retry, and the starving
// shards' retry timer would keep extending a lease nobody can spend from,
// so it would never be handed back.
func (m *Machine) nothingMore(a *account, now int64) {
	a.backoff = min(max(2*a.backoff, m.cfg.Retry), maxBackoff)
	a.retryAt = now + a.backoff
	m.serve(a, now)
}

// maxBackoff bounds nothingMore's backoff: funds another node returns to
// the ledger are found within it.
const maxBackoff = int64(30e9)

// failedCall follows an acquire or extend that did not complete, or that
// the ledger did not accept: the machine asks again after Retry, doubling
// while it keeps failing, up to maxBackoff — the shards' retries of a
// client's requests would otherwise cost a ledger call per Retry for as
// long as the ledger is out of reach. A call that did not complete is asked
// again at once when the ledger answers anything (ledgerBack), so the
// back-off does not outlast an outage.
func (m *Machine) failedCall(a *account, r Result, now int64) {
	m.stats.Errors++
	a.backoff = min(max(2*a.backoff, m.cfg.Retry), maxBackoff)
	a.retryAt = now + a.backoff
	if r.Outcome == Failed && !a.failing {
		a.failing = true
		m.failing = append(m.failing, a)
	}
}

// refused handles a refused or failed acquire.
func (m *Machine) refused(a *account, r Result, now int64) {
	if r.Outcome != Refused && r.Outcome != RefusedInactive {
		m.failedCall(a, r, now)
		return
	}
	m.stats.Refused++
	if r.Outcome == Refused && r.HasEvidence && r.Evidence.Remaining > 0 && m.siblings(a, now) {
		a.retryAt = now + m.cfg.Retry // their release asks again (unblock)
		return
	}
	m.nothingMore(a, now)
}

// siblings hands back the idle leases this node holds for other accounts
// under the scope whose exhaustion starves a: their units return to the
// scope's balance, and a asks again once a release completes.
// It reports whether it handed any back (funds are on their way).
func (m *Machine) siblings(a *account, now int64) bool {
	scope := a.scopeAccount(a.ev.Scope)
	if scope == "" || !a.hasEv || a.ev.Remaining == 0 {
		return false
	}
	handed := false
	take := func(b *account) {
		if b != a && b.cur != nil && now-b.lastDraw >= m.cfg.SiblingIdle {
			m.stats.SiblingsHandedBack++
			m.handBack(b, b.cur, now)
			handed = true
		}
	}
	for _, b := range m.under[scope] {
		take(b)
	}
	if s := m.accounts[scope]; s != nil {
		take(s)
	}
	return handed
}

// scopeAccount is the account of a's chain at scope s ("" if none).
func (a *account) scopeAccount(s core.Scope) core.AccountID {
	if s == a.scope {
		return a.id
	}
	i := int(s) - int(a.scope) - 1
	if i >= 0 && i < len(a.ancestors) {
		return a.ancestors[i]
	}
	return ""
}

// timer is an entry of the machine's deadline heap; an entry whose time is
// no longer its account's timerAt is stale and skipped.
type timer struct {
	at   int64
	seq  uint64
	acct *account
}

type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
