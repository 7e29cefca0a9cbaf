// Package plane is the control plane's state machine: it composes funding
// (node leases and shard slices), shares (limits across shards) and
// durability (the spool and the answers it releases), routes forwarded
// reservation operations between shards, and fans provisioning out to
// every shard.
//
// Like etcd's raft it does no I/O. Inputs are methods — a message popped
// from a shard's ring, a ledger call's result, the spool's durable mark, a
// provisioning change, Tick(now) — and what should happen accumulates as
// intents: per-shard queues of messages (Queue, Sent) and an ordered list
// of effects for the shell (ledger calls, spool appends, evidence to
// publish, post-paid ingests). Next says when the machine next needs a
// Tick, so the shell sleeps until then when nothing arrives.
//
// Bounds. A shard's queue accepts grants and provisioning only below
// QueueSoft messages: a grant that finds it full waits in funding (the
// shard stays wanting), a provisioning change is refused with ErrBusy (the
// shell retries once the queue drains, so the admin call waits). Protocol
// messages — reclaims, share moves, replies, durable marks — are always
// queued; their number is bounded by the machine's own state (accounts,
// leases, forwarded operations in flight).
package plane

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/tollgated/tollgated/control/durability"
	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/control/shares"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/invariant"
)

// Config sets the machine's parts.
type Config struct {
	Shards     int
	Funding    funding.Config
	Shares     shares.Config
	Durability durability.Config
	// QueueSoft is how many messages a shard's queue holds before grants
	// and provisioning wait (4096).
	QueueSoft int
	// KeyUseFlush is how long (ns) the machine gathers the shards' key-use
	// reports before handing them to the ledger in one batch (5 s).
	KeyUseFlush int64
}

// ErrBusy refuses a provisioning change while a shard's queue is full;
// retry once the shell has delivered what is queued.
var ErrBusy = errors.New("plane: a shard's queue is full")

// ErrUnknownAccount refuses a key for an account the shards do not hold.
var ErrUnknownAccount = errors.New("plane: no such account is installed")

// EffectKind says what an Effect asks of the shell.
type EffectKind uint8

const (
	EffectCall    EffectKind = iota + 1 // run ledger call Call; report with LedgerDone
	EffectAppend                        // append Records(e) to the spool, as sequences Seq, Seq+1, …
	EffectPublish                       // store Evidence in Cell (Clear: empty it)
	EffectIngest                        // ingest Ingest.Events (post-paid); report with IngestDone
	EffectClaim                         // the exporter must not bill Ingest.Events until EffectUnclaim
	EffectUnclaim
	// EffectFundingChanged: post-paid usage moved balances of Accounts:
	// refresh their evidence, then report with Refreshed(Ingest).
	EffectFundingChanged
	EffectKeysUsed // record Keys' last use in the ledger (best effort, coarse)
	// EffectAnnounce: tell the other nodes of a fleet Announce (a hint:
	// best effort).
	EffectAnnounce
)

// Announcement is what a node tells the other nodes of a fleet about an
// account's funding.
type Announcement struct {
	Kind    AnnounceKind
	Account core.AccountID
	// Holding is what the announcing node holds of Account (Want).
	Holding core.CostUnits
	// From names the announcing node (filled in by the fleet's transport).
	From string
}

// AnnounceKind says what an Announcement asks or tells.
type AnnounceKind uint8

const (
	// Want: the ledger refused this node funding that other nodes hold
	// in their leases; they hand it back (Machine.Recall).
	Want AnnounceKind = iota + 1
	// Returned: this node released unspent units to the ledger; nodes
	// waiting for them ask again (Machine.Returned).
	Returned
)

// Effect is one intent for the shell, other than a shard message.
type Effect struct {
	Kind     EffectKind
	Call     funding.Call
	Seq      uint64
	recs     [2]int // the records' [first, end) in the machine's recEnds
	Cell     *core.EvidenceCell
	Evidence core.FundingEvidence
	Clear    bool
	Ingest   *Ingest
	Accounts []core.AccountID
	Keys     []KeyUsed
	Announce Announcement
}

// KeyUsed says the key of Principal authenticated on a shard by At.
type KeyUsed struct {
	Principal core.Principal
	At        int64
}

// Ingest is a post-paid batch waiting for the ledger.
type Ingest struct {
	Ticket uint64
	Events []record.Event
	from   int
	batch  *message.PostPaidBatch
}

// Stats counts what the machine did.
type Stats struct {
	Usage, Commits, Refills, Forwards, PostPaid uint64
	Funding                                     funding.Stats
	Shares                                      shares.Stats
	Durability                                  durability.Stats
}

// Machine is the control plane's state.
type Machine struct {
	cfg      Config
	fund     *funding.Machine
	shares   *shares.Machine
	dur      *durability.Machine
	accounts map[core.AccountID]*account
	queues   [][]message.Inbound
	// queued and delivered count, per shard, the messages ever queued for
	// it and handed to its ring (Sent): a change is in a shard's ring once
	// delivered reaches what queued was when the change was made.
	queued, delivered []uint64
	effects           []Effect
	arena             []byte
	recEnds           []int // where each record of the arena ends
	scratch           []byte
	tickets           uint64
	awaiting          map[uint64]any // durability tickets: *Ingest or funding.Call (a release)
	ingests           map[uint64]*Ingest
	// recalls are post-paid batches billed and refreshed, whose answer
	// waits until the leases the refresh retired are back from the
	// shards; bounded by the post-paid batches in flight.
	recalls []recall
	// keysUsed gathers key-use reports until keysDue (0: none gathered);
	// bounded by the keys bound to the shards.
	keysUsed map[core.Principal]int64
	keysDue  int64
	stats    Stats
}

type recall struct {
	in   *Ingest
	mark uint64 // funding.Machine.Retired when the refresh was applied
}

type account struct {
	snap     *core.Snapshot
	evidence *core.EvidenceCell
}

// New returns a machine for cfg.Shards shards.
func New(cfg Config) *Machine {
	if cfg.Shards <= 0 {
		cfg.Shards = 1
	}
	if cfg.QueueSoft <= 0 {
		cfg.QueueSoft = 4096
	}
	if cfg.KeyUseFlush <= 0 {
		cfg.KeyUseFlush = 5e9
	}
	cfg.Funding.Shards, cfg.Shares.Shards, cfg.Durability.Shards = cfg.Shards, cfg.Shards, cfg.Shards
	m := &Machine{cfg: cfg, accounts: make(map[core.AccountID]*account),
		queues: make([][]message.Inbound, cfg.Shards), queued: make([]uint64, cfg.Shards), delivered: make([]uint64, cfg.Shards),
		awaiting: make(map[uint64]any), ingests: make(map[uint64]*Ingest)}
	m.fund = funding.New(cfg.Funding, fundingOut{m})
	m.shares = shares.New(cfg.Shares, sharesOut{m})
	m.dur = durability.New(cfg.Durability, durabilityOut{m})
	return m
}

// Stats returns the counters.
func (m *Machine) Stats() Stats {
	s := m.stats
	s.Funding, s.Shares, s.Durability = m.fund.Stats(), m.shares.Stats(), m.dur.Stats()
	return s
}

// Shards is the number of shards.
func (m *Machine) Shards() int { return m.cfg.Shards }

// Queue is what waits for shard i, oldest first; the shell pushes a prefix
// of it and reports how many with Sent.
func (m *Machine) Queue(i int) []message.Inbound { return m.queues[i] }

// Sent drops the first n messages of shard i's queue, delivered.
func (m *Machine) Sent(i, n int, now int64) {
	if n <= 0 {
		return
	}
	q := m.queues[i]
	full := len(q) >= m.cfg.QueueSoft
	m.delivered[i] += uint64(n)
	clear(q[:n])
	m.queues[i] = append(q[:0], q[n:]...)
	if full && len(m.queues[i]) < m.cfg.QueueSoft {
		m.fund.Drained(i, now)
	}
}

// Effects are the intents other than shard messages, in order. The shell
// executes all of them, then calls ClearEffects.
func (m *Machine) Effects() []Effect { return m.effects }

// Records are the spool records of an EffectAppend, with their sequence
// numbers, in order. Consecutive records make one effect: a busy plane
// appends thousands a pass, and an effect is ten times a record's size.
func (m *Machine) Records(e *Effect) iter.Seq2[uint64, []byte] {
	return func(yield func(uint64, []byte) bool) {
		for i := e.recs[0]; i < e.recs[1]; i++ {
			start := 0
			if i > 0 {
				start = m.recEnds[i-1]
			}
			if !yield(e.Seq+uint64(i-e.recs[0]), m.arena[start:m.recEnds[i]]) {
				return
			}
		}
	}
}

// ClearEffects forgets the effects the shell has executed.
func (m *Machine) ClearEffects() {
	clear(m.effects)
	m.effects = m.effects[:0]
	m.arena = m.arena[:0]
	m.recEnds = m.recEnds[:0]
}

// Next is when the machine next needs Tick (0: not until an input).
func (m *Machine) Next() int64 {
	next := int64(0)
	for _, t := range [...]int64{m.fund.Next(), m.shares.Next(), m.dur.Next(), m.keysDue} {
		if t != 0 && (next == 0 || t < next) {
			next = t
		}
	}
	return next
}

// Tick runs what is due at now.
func (m *Machine) Tick(now int64) {
	m.fund.Tick(now)
	m.shares.Tick(now)
	m.dur.Tick(now)
	if m.keysDue != 0 && now >= m.keysDue {
		m.flushKeysUsed()
	}
}

// keyUsed gathers one shard's report that a key authenticated.
func (m *Machine) keyUsed(p core.Principal, now int64) {
	if m.keysUsed == nil {
		m.keysUsed = make(map[core.Principal]int64)
	}
	m.keysUsed[p] = now
	if m.keysDue == 0 {
		m.keysDue = now + m.cfg.KeyUseFlush
	}
}

func (m *Machine) flushKeysUsed() {
	keys := make([]KeyUsed, 0, len(m.keysUsed))
	for p, at := range m.keysUsed {
		keys = append(keys, KeyUsed{Principal: p, At: at})
	}
	// Map order is random; the outbox must not be.
	slices.SortFunc(keys, func(a, b KeyUsed) int {
		return cmp.Or(cmp.Compare(a.Principal.Hi, b.Principal.Hi), cmp.Compare(a.Principal.Lo, b.Principal.Lo))
	})
	clear(m.keysUsed)
	m.keysDue = 0
	m.effects = append(m.effects, Effect{Kind: EffectKeysUsed, Keys: keys})
}

// Marks are, per shard, the number of its last usage event on disk, for
// the shell to publish in each shard's DurableMark (durability.Marks). The
// slice is the machine's: read it, do not keep it.
func (m *Machine) Marks() []uint64 { return m.dur.Marks() }

// Floor is the highest spool sequence the exporter may let the spool drop.
func (m *Machine) Floor() uint64 { return m.dur.Floor() }

// Quiet reports whether no lease is held and no ledger call is out.
func (m *Machine) Quiet() bool { return m.fund.Quiet() && len(m.awaiting) == 0 && len(m.ingests) == 0 }

// Holding is the units this node holds for id in its leases and slices.
func (m *Machine) Holding(id core.AccountID) core.CostUnits { return m.fund.Holding(id) }

// Idle reports whether nothing waits for any shard and nothing for the
// spool.
func (m *Machine) Idle() bool {
	for _, q := range m.queues {
		if len(q) > 0 {
			return false
		}
	}
	return !m.dur.Pending()
}

// FromShard handles one message popped from shard from's ring.
func (m *Machine) FromShard(from int, msg *message.Outbound, now int64) {
	switch msg.Kind {
	case message.OutUsage:
		m.usage(from, msg, now)
	case message.OutCommit:
		m.stats.Commits++
		r := m.record(record.Commit, &msg.Usage)
		m.scratch = record.Append(m.scratch[:0], &r)
		m.dur.Commit(from, msg.Seq, msg.Usage.RequestID, m.scratch, now)
	case message.OutRefill:
		m.stats.Refills++
		// A shard that refused a quote still holds what its slice has
		// left: it needs only the difference.
		m.fund.Refill(from, msg.Account, msg.Needed-min(msg.Units, msg.Needed), msg.Seq, now)
	case message.OutReturn:
		m.fund.Return(from, msg.Account, msg.Token, msg.Units, now)
		if len(m.recalls) > 0 {
			m.answerRecalled()
		}
	case message.OutForward:
		m.stats.Forwards++
		if int(msg.To) >= len(m.queues) {
			m.send(from, message.Inbound{Kind: message.InReply, Op: msg.Op, Ticket: msg.Ticket, Status: message.ReplyUnknownReservation})
			return
		}
		m.send(int(msg.To), message.Inbound{Kind: message.InForward, Op: msg.Op, From: msg.From, Res: msg.Res,
			Units: msg.Units, Principal: msg.Principal, Ticket: msg.Ticket})
	case message.OutReply:
		reply := message.Inbound{Kind: message.InReply, Op: msg.Op, Ticket: msg.Ticket, Status: msg.Status,
			Reason: msg.Reason, Units: msg.Units}
		if int(msg.To) >= len(m.queues) {
			return
		}
		if msg.Op == message.OpFinish || msg.Op == message.OpCommit {
			// The owner billed or journaled: the answer waits, like a
			// local one, until that record is durable.
			m.dur.Hold(from, int(msg.To), reply)
			return
		}
		m.send(int(msg.To), reply)
	case message.OutStarved:
		m.shares.Starved(from, msg.Account, now)
	case message.OutShareAck:
		m.shares.Ack(from, msg.Account, msg.Seq, msg.InFlight, now)
	case message.OutPostPaid:
		m.postPaid(from, msg, now)
	case message.OutKeyUsed:
		m.keyUsed(msg.Principal, now)
	default:
		invariant.Violated(invariant.UnknownKind, fmt.Sprintf("shard %d sent a message of kind %d", from, msg.Kind))
	}
}

// usage spools a billed event, closes its commit entry and settles it
// against the lease that funded it.
func (m *Machine) usage(from int, msg *message.Outbound, now int64) {
	m.stats.Usage++
	ev := &msg.Usage
	var d funding.Draw
	if ev.Source == core.SourceLease {
		d = m.fund.Drawn(ev.Account(), ev.FencingToken)
	}
	r := record.FromEvent(record.Usage, ev, d.LeaseID())
	m.scratch = record.Append(m.scratch[:0], &r)
	m.dur.Record(from, msg.Seq, m.scratch)
	m.dur.Closed(ev.RequestID)
	if ev.Source == core.SourceLease {
		// After the append: settling may retire the lease, whose release
		// waits for every record appended so far, this one included.
		m.fund.Settle(from, d, ev.Units, now)
		if len(m.recalls) > 0 {
			m.answerRecalled()
		}
	}
}

// record is a shard's event as a spool record, naming the ledger lease
// behind its fencing token.
func (m *Machine) record(k record.Kind, ev *core.UsageEvent) record.Record {
	var lease uint64
	if ev.Source == core.SourceLease {
		lease = m.fund.Drawn(ev.Account(), ev.FencingToken).LeaseID()
	}
	return record.FromEvent(k, ev, lease)
}

// Every event id a shard accepts fits a spool record (this fails to
// compile otherwise).
const _ = uint(record.MaxEventIDLen - message.MaxEventIDLen)

// postPaid spools a post-paid batch and, once it is durable, bills it in
// the ledger; the shard is answered with the ledger's counts.
func (m *Machine) postPaid(from int, msg *message.Outbound, now int64) {
	m.stats.PostPaid++
	b := msg.Batch
	if len(b.Events) == 0 {
		m.send(from, message.Inbound{Kind: message.InPostPaidDone, Ticket: msg.Ticket, Batch: b})
		return
	}
	in := &Ingest{Ticket: msg.Ticket, from: from, batch: b, Events: make([]record.Event, len(b.Events))}
	for i, e := range b.Events {
		in.Events[i] = record.Event{ID: e.ID, Account: e.Account, Source: record.SourcePostPaid, Units: e.Units, OccurredAt: e.OccurredAt}
	}
	// Claimed before it can be durable: the exporter, which bills what is
	// durable, must leave these to the plane, or the reporter would be
	// told "duplicate" for its own first report.
	m.effects = append(m.effects, Effect{Kind: EffectClaim, Ingest: in})
	for i := range in.Events {
		r := record.Record{Kind: record.Usage, Usage: in.Events[i], EventID: b.Events[i].EventID}
		m.scratch = record.Append(m.scratch[:0], &r)
		m.dur.Record(from, 0, m.scratch)
	}
	m.tickets++
	m.awaiting[m.tickets] = in
	m.dur.Await(from, m.tickets)
}

// IngestResult is what the ledger did with one post-paid event.
type IngestResult uint8

const (
	Accepted  IngestResult = iota + 1 // billed now
	Duplicate                         // billed before
	Rejected                          // not billable (an unknown account)
)

// IngestDone applies a post-paid ingest's result: the shard is answered,
// the claim lifted, and the funding of the accounts billed refreshed.
func (m *Machine) IngestDone(in *Ingest, results []IngestResult, err error) {
	delete(m.ingests, in.Ticket)
	m.effects = append(m.effects, Effect{Kind: EffectUnclaim, Ingest: in})
	b := in.batch
	if err != nil {
		b.Failed = true // the events are durable: the exporter bills them
	} else {
		var changed []core.AccountID
		for i, r := range results {
			switch r {
			case Accepted:
				b.Accepted++
				changed = append(changed, in.Events[i].Account)
			case Duplicate:
				b.Duplicate++
			default:
				b.Rejected++
			}
		}
		if len(changed) > 0 {
			// The reporter hears back once the debt, if any, stops its
			// accounts: after the refresh and the leases it retires.
			m.effects = append(m.effects, Effect{Kind: EffectFundingChanged, Accounts: changed, Ingest: in})
			return
		}
	}
	m.send(in.from, message.Inbound{Kind: message.InPostPaidDone, Ticket: in.Ticket, Batch: b})
}

// Refreshed reports that the evidence of a post-paid batch's accounts was
// refreshed (Evidence), or could not be: its answer goes out once every
// lease retired so far is back from the shards.
func (m *Machine) Refreshed(in *Ingest) {
	m.recalls = append(m.recalls, recall{in: in, mark: m.fund.Retired()})
	m.answerRecalled()
}

// answerRecalled answers the post-paid batches whose leases are back.
func (m *Machine) answerRecalled() {
	kept := m.recalls[:0]
	for _, r := range m.recalls {
		if !m.fund.Recalled(r.mark) {
			kept = append(kept, r)
			continue
		}
		m.send(r.in.from, message.Inbound{Kind: message.InPostPaidDone, Ticket: r.in.Ticket, Batch: r.in.batch})
	}
	clear(m.recalls[len(kept):])
	m.recalls = kept
}

// LedgerDone applies a funding call's result.
func (m *Machine) LedgerDone(r funding.Result, now int64) { m.fund.Done(r, now) }

// SpoolDurable is the spool's durable mark.
func (m *Machine) SpoolDurable(seq uint64) { m.dur.Durable(seq) }

// HandBackAll retires every lease, for shutdown (after the shards ended
// their reservations): each is released once its slices are back.
func (m *Machine) HandBackAll(now int64) { m.fund.HandBackAll(now) }

func (m *Machine) send(i int, msg message.Inbound) {
	m.queues[i] = append(m.queues[i], msg)
	m.queued[i]++
}

// QueuedMarks returns, per shard, how many messages were ever queued for
// it: DeliveredUpTo tells when what was queued so far is in the rings.
func (m *Machine) QueuedMarks() []uint64 { return slices.Clone(m.queued) }

// DeliveredUpTo reports whether every shard's ring has received the
// messages queued for it up to marks (QueuedMarks).
func (m *Machine) DeliveredUpTo(marks []uint64) bool {
	for i, q := range marks {
		if m.delivered[i] < q {
			return false
		}
	}
	return true
}

// roomForAll reports whether every shard's queue is below QueueSoft.
func (m *Machine) roomForAll() bool {
	for _, q := range m.queues {
		if len(q) >= m.cfg.QueueSoft {
			return false
		}
	}
	return true
}

func (m *Machine) broadcast(msg message.Inbound) {
	for i := range m.queues {
		m.send(i, msg)
	}
}

// Install publishes snap to every shard: a new account, or a newer policy
// or standing of a known one.
func (m *Machine) Install(snap *core.Snapshot, now int64) error {
	if err := snap.Validate(); err != nil {
		return err
	}
	a := m.accounts[snap.Account]
	if a != nil && snap.Generation <= a.snap.Generation {
		return core.ErrOlderGeneration
	}
	if !m.roomForAll() {
		return ErrBusy
	}
	fresh := a == nil
	if fresh {
		a = &account{evidence: new(core.EvidenceCell)}
		m.accounts[snap.Account] = a
	}
	a.snap = snap
	m.broadcast(message.Inbound{Kind: message.InInstall, Snap: snap})
	if fresh {
		m.broadcast(message.Inbound{Kind: message.InEvidence, Account: snap.Account, Evidence: a.evidence})
	} else {
		// A new policy may change the budget view: old evidence must not
		// refuse under it. The next ledger answer publishes fresh evidence.
		m.effects = append(m.effects, Effect{Kind: EffectPublish, Cell: a.evidence, Clear: true})
	}
	m.shares.Limits(snap.Account, snap.Limits, now)
	m.fund.Install(snap.Account, snap.Scope, snap.Ancestors, snap.Status == core.StatusActive, now)
	return nil
}

// Bind lets the key with digest d act for account on every shard.
func (m *Machine) Bind(d credential.Digest, id core.AccountID) error {
	return m.provision(message.Inbound{Kind: message.InBind, Principal: d.Principal(), Digest: d, Account: id})
}

// BindInstalled is Bind for a caller that does not know the account
// exists: the key is sent only when the account was installed, so in every
// shard's ring it follows the account's install (a key for an account a
// shard does not hold is a broken invariant there). Otherwise
// ErrUnknownAccount, and nothing is sent.
func (m *Machine) BindInstalled(d credential.Digest, id core.AccountID) error {
	if m.accounts[id] == nil {
		return ErrUnknownAccount
	}
	return m.Bind(d, id)
}

// Unbind stops the key with digest d on every shard.
func (m *Machine) Unbind(d credential.Digest) error {
	return m.provision(message.Inbound{Kind: message.InUnbind, Principal: d.Principal()})
}

// BindPlatform lets a platform token call the seed-000 routes.
func (m *Machine) BindPlatform(d credential.Digest) error {
	return m.provision(message.Inbound{Kind: message.InBindPlatform, Principal: d.Principal(), Digest: d})
}

// UnbindPlatform stops a platform token.
func (m *Machine) UnbindPlatform(d credential.Digest) error {
	return m.provision(message.Inbound{Kind: message.InUnbindPlatform, Principal: d.Principal()})
}

// Ready tells every shard its initial state is delivered.
func (m *Machine) Ready() error { return m.provision(message.Inbound{Kind: message.InReady}) }

func (m *Machine) provision(msg message.Inbound) error {
	if !m.roomForAll() {
		return ErrBusy
	}
	m.broadcast(msg)
	return nil
}

// Heard is an announcement from another node of the fleet.
func (m *Machine) Heard(a Announcement, now int64) {
	switch a.Kind {
	case Want:
		m.fund.Recall(a.Account, a.From, a.Holding, now)
	case Returned:
		m.fund.Returned(a.Account, now)
	default:
		invariant.Violated(invariant.UnknownKind, fmt.Sprintf("an announcement of kind %d", a.Kind))
	}
}

// Evidence is new funding evidence for id from the ledger, outside the
// machine's own calls (after a deposit, a budget, post-paid usage).
func (m *Machine) Evidence(id core.AccountID, ev core.FundingEvidence, readAt, now int64) {
	m.fund.Evidence(id, ev, readAt, now)
}

// fundingOut, sharesOut and durabilityOut are the machine as each part's
// Out.
type fundingOut struct{ m *Machine }

func (o fundingOut) Grant(i int, msg message.Inbound) bool {
	if len(o.m.queues[i]) >= o.m.cfg.QueueSoft {
		return false
	}
	o.m.send(i, msg)
	return true
}

func (o fundingOut) Send(i int, msg message.Inbound) { o.m.send(i, msg) }

func (o fundingOut) Call(c funding.Call) {
	m := o.m
	if c.Kind == funding.CallRelease {
		// A release claims the lease's pool as unspent: first make every
		// usage record of it durable, so that a crash cannot leave a
		// release credited for units whose usage never reaches the ledger.
		m.tickets++
		m.awaiting[m.tickets] = c
		m.dur.AwaitAll(m.tickets)
		return
	}
	m.effects = append(m.effects, Effect{Kind: EffectCall, Call: c})
}

func (o fundingOut) Want(id core.AccountID, holding core.CostUnits) {
	o.m.effects = append(o.m.effects, Effect{Kind: EffectAnnounce,
		Announce: Announcement{Kind: Want, Account: id, Holding: holding}})
}

func (o fundingOut) Returned(id core.AccountID) {
	o.m.effects = append(o.m.effects, Effect{Kind: EffectAnnounce, Announce: Announcement{Kind: Returned, Account: id}})
}

func (o fundingOut) Publish(id core.AccountID, ev core.FundingEvidence) {
	if a := o.m.accounts[id]; a != nil {
		o.m.effects = append(o.m.effects, Effect{Kind: EffectPublish, Cell: a.evidence, Evidence: ev})
	}
}

type sharesOut struct{ m *Machine }

func (o sharesOut) Send(i int, msg message.Inbound) { o.m.send(i, msg) }

type durabilityOut struct{ m *Machine }

func (o durabilityOut) Append(seq uint64, rec []byte) {
	m := o.m
	m.arena = append(m.arena, rec...)
	m.recEnds = append(m.recEnds, len(m.arena))
	i := len(m.recEnds) - 1
	if n := len(m.effects); n > 0 {
		if last := &m.effects[n-1]; last.Kind == EffectAppend && last.recs[1] == i && last.Seq+uint64(i-last.recs[0]) == seq {
			last.recs[1]++ // the next record of the run the last effect appends
			return
		}
	}
	m.effects = append(m.effects, Effect{Kind: EffectAppend, Seq: seq, recs: [2]int{i, i + 1}})
}

func (o durabilityOut) Send(i int, msg message.Inbound) { o.m.send(i, msg) }

func (o durabilityOut) Durable(ticket uint64) {
	m := o.m
	w := m.awaiting[ticket]
	delete(m.awaiting, ticket)
	switch w := w.(type) {
	case *Ingest:
		m.ingests[w.Ticket] = w
		m.effects = append(m.effects, Effect{Kind: EffectIngest, Ingest: w})
	case funding.Call:
		m.effects = append(m.effects, Effect{Kind: EffectCall, Call: w})
	default:
		invariant.Violated(invariant.UnknownKind, fmt.Sprintf("durable ticket %d awaited by %T", ticket, w))
	}
}

// Debug describes an account's funding (for the simulator's failure reports).
func (m *Machine) Debug(id string) string { return m.fund.Debug(id) }
