package control

import (
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/invariant"
	"github.com/tollgated/tollgated/shard"
)

// Shell is the control plane's I/O around its state machine, and nothing
// more. One pass (Step) pops the shards' rings into the machine, ticks it,
// and carries out what it asks: shard messages into the rings, durable
// marks, spool records, evidence, ledger calls, post-paid ingests and the
// provisioner's refreshes. It has no goroutine and reads no clock: the
// daemon's Plane runs it on a goroutine that sleeps between passes, and the
// simulator runs this very Shell pass by pass on a virtual clock, over a
// spool, a ledger and hooks of its own (ShellIO).
//
// It is used from one goroutine at a time. Results of the work it hands
// out (CallDone, IngestDone, Refreshed) come back on that goroutine.
type Shell struct {
	m     *plane.Machine
	links []Link
	io    ShellIO

	// backlog holds spool records the spool refused as full, in order.
	// While it is not empty no shard ring is read, so shards fill their
	// rings and shed new billing (accounting-busy): the bound is the
	// records one pass produced.
	backlog  [][]byte
	broken   bool
	appended uint64 // the spool sequence of the last record this shell appended

	// refreshes are post-paid batches whose funding refresh the hooks had
	// no room for yet: offered again every pass, in order. Bounded by the
	// post-paid batches in flight, which the shards bound.
	refreshes []refresh

	// popped receives each shard's outbound messages in turn. (A pool, Get
	// and Put for every shard on every pass, cost about a tenth of the
	// plane's CPU at 64 shards.)
	popped *[256]message.Outbound
	// marks are the durable marks as last published, per shard.
	marks []uint64
}

type refresh struct {
	in  *plane.Ingest
	ids []core.AccountID
}

// ShellIO is what a Shell acts through.
type ShellIO struct {
	// Spool makes records durable (required).
	Spool Spool
	// IsFull reports whether an Append error is transient backpressure;
	// any other error means the spool is broken (nothing is appended any
	// more: fail-stop).
	IsFull func(error) bool
	// Ledger runs funding calls and post-paid ingests (required).
	Ledger Ledger
	// Hooks hears what the machine asks of the rest of the node (nil:
	// funding refreshes complete at once, key use is dropped).
	Hooks Hooks
	// Claims, shared with the Exporter, keeps it from billing post-paid
	// events the plane is billing itself.
	Claims *PostPaidClaims
	// Syncing, shared with the shards, is stored after every pass: whether
	// records this shell appended are not yet durable (shard.SpoolSyncing).
	Syncing *shard.SpoolSyncing
}

// Ledger runs the machine's ledger work off the shell's goroutine. Each
// call's result must come back, exactly once, through Shell.CallDone or
// Shell.IngestDone on the shell's goroutine.
type Ledger interface {
	Call(c funding.Call)
	Ingest(in *plane.Ingest)
}

// Hooks is the rest of the node, as the machine reaches it.
type Hooks interface {
	// FundingChanged asks for the evidence of ids to be read again from
	// the ledger and published (through the machine's Evidence), then
	// for Shell.Refreshed(in) on the shell's goroutine. It reports false,
	// doing nothing, when it has no room now: the shell offers it again
	// on its next pass.
	FundingChanged(in *plane.Ingest, ids []core.AccountID) bool
	// KeysUsed records keys' last use: best effort, coarse (a report that
	// finds no room may be dropped; the next one says the same).
	KeysUsed(keys []plane.KeyUsed)
	// Announce tells the other nodes of a fleet a (best effort: a lost
	// announcement delays funding until a client asks again).
	Announce(a plane.Announcement)
}

// Heard is an announcement from another node of the fleet, at now.
func (s *Shell) Heard(a plane.Announcement, now int64) { s.m.Heard(a, now) }

// NewShell joins machine m to its shards' links through io.
func NewShell(m *plane.Machine, links []Link, io ShellIO) (*Shell, error) {
	if m.Shards() != len(links) {
		return nil, fmt.Errorf("control: a machine for %d shards over %d links", m.Shards(), len(links))
	}
	if io.Spool == nil || io.Ledger == nil {
		return nil, errors.New("control: a shell needs a spool and a ledger")
	}
	for _, l := range links {
		if l.In == nil || l.Out == nil || l.Durable == nil {
			return nil, errors.New("control: a link needs both rings and a durable mark")
		}
	}
	if io.IsFull == nil {
		io.IsFull = func(error) bool { return false }
	}
	return &Shell{m: m, links: links, io: io, popped: new([256]message.Outbound), marks: make([]uint64, len(links))}, nil
}

// Machine is the state machine, for inputs from the shell's goroutine.
func (s *Shell) Machine() *plane.Machine { return s.m }

// Step is one pass at now: inputs in, intents out. It reports how much it
// found to do (0: nothing; the caller may sleep until Next or an input).
func (s *Shell) Step(now int64) int {
	worked := 0
	if s.retryBacklog() {
		for i := range s.links {
			worked += s.drainShard(i, now)
		}
	}
	s.m.SpoolDurable(s.io.Spool.Durable())
	if next := s.m.Next(); next != 0 && now >= next {
		s.m.Tick(now)
		worked++
	}
	worked += s.offerRefreshes()
	worked += s.execute(now)
	if s.io.Syncing != nil {
		s.io.Syncing.Set(s.appended > s.io.Spool.Durable())
	}
	return worked
}

// Next is when the machine next needs a pass without an input (0: never).
func (s *Shell) Next() int64 { return s.m.Next() }

// CallDone applies a funding call's result at now.
func (s *Shell) CallDone(r funding.Result, now int64) { s.m.LedgerDone(r, now) }

// IngestDone applies a post-paid ingest's result.
func (s *Shell) IngestDone(in *plane.Ingest, res []plane.IngestResult, err error) {
	s.m.IngestDone(in, res, err)
}

// Refreshed reports that a post-paid batch's funding refresh is done.
func (s *Shell) Refreshed(in *plane.Ingest) { s.m.Refreshed(in) }

// Backlog is how many records wait for room in the spool.
func (s *Shell) Backlog() int { return len(s.backlog) }

// Broken reports whether the spool failed for good: nothing more is
// appended, so nothing more is acknowledged.
func (s *Shell) Broken() bool { return s.broken }

// Undelivered reports whether messages wait for room in a shard's ring.
func (s *Shell) Undelivered() bool {
	for i := range s.links {
		if len(s.m.Queue(i)) > 0 {
			return true
		}
	}
	return false
}

func (s *Shell) drainShard(i int, now int64) int {
	buf := s.popped
	k := s.links[i].Out.Ring().PopBatch(buf[:])
	for j := range k {
		s.m.FromShard(i, &buf[j], now)
		buf[j] = message.Outbound{}
	}
	return k
}

// execute carries out the machine's intents: effects in order, then each
// shard's queue into its ring as far as it has room, then the durable
// marks.
func (s *Shell) execute(now int64) int {
	n := 0
	effects := s.m.Effects()
	for i := range effects {
		e := &effects[i]
		n++
		switch e.Kind {
		case plane.EffectCall:
			s.io.Ledger.Call(e.Call)
		case plane.EffectAppend:
			for seq, rec := range s.m.Records(e) {
				s.append(seq, rec)
			}
		case plane.EffectPublish:
			if e.Clear {
				e.Cell.Clear()
			} else {
				e.Cell.Store(e.Evidence)
			}
		case plane.EffectIngest:
			s.io.Ledger.Ingest(e.Ingest)
		case plane.EffectClaim:
			if s.io.Claims != nil {
				s.io.Claims.Claim(e.Ingest.Events)
			}
		case plane.EffectUnclaim:
			if s.io.Claims != nil {
				s.io.Claims.Unclaim(e.Ingest.Events)
			}
		case plane.EffectFundingChanged:
			s.refreshes = append(s.refreshes, refresh{in: e.Ingest, ids: e.Accounts})
		case plane.EffectKeysUsed:
			if s.io.Hooks != nil {
				s.io.Hooks.KeysUsed(e.Keys)
			}
		case plane.EffectAnnounce:
			if s.io.Hooks != nil {
				s.io.Hooks.Announce(e.Announce)
			}
		default:
			invariant.Violated(invariant.UnknownKind, fmt.Sprintf("an effect of kind %d", e.Kind))
		}
	}
	s.m.ClearEffects()
	n += s.offerRefreshes()
	for i, l := range s.links {
		q := s.m.Queue(i)
		if len(q) == 0 {
			continue
		}
		k := l.In.PushBatch(q)
		s.m.Sent(i, k, now)
		n += k
	}
	for i, mark := range s.m.Marks() {
		if mark != s.marks[i] {
			s.marks[i] = mark
			s.links[i].Durable.Publish(mark)
			s.links[i].In.Notify() // after the store: see shard.DurableMark
			n++
		}
	}
	return n
}

// offerRefreshes hands the waiting funding refreshes to the hooks, in
// order, as far as they have room.
func (s *Shell) offerRefreshes() int {
	n := 0
	for n < len(s.refreshes) {
		r := s.refreshes[n]
		if s.io.Hooks == nil {
			s.m.Refreshed(r.in)
		} else if !s.io.Hooks.FundingChanged(r.in, r.ids) {
			break
		}
		s.refreshes[n] = refresh{}
		n++
	}
	s.refreshes = s.refreshes[n:]
	if len(s.refreshes) == 0 {
		s.refreshes = nil
	}
	return n
}

// append writes one record, or keeps it (and every later one) for when the
// spool has room again.
func (s *Shell) append(seq uint64, rec []byte) {
	if s.broken {
		return
	}
	if len(s.backlog) > 0 {
		s.backlog = append(s.backlog, append([]byte(nil), rec...))
		return
	}
	got, err := s.io.Spool.Append(rec)
	switch {
	case err == nil:
		s.appended = got
		if got != seq {
			invariant.Violated(invariant.SpoolBroken, fmt.Sprintf("the spool numbered record %d as %d", seq, got))
		}
	case s.io.IsFull(err):
		s.backlog = append(s.backlog, append([]byte(nil), rec...))
	default:
		s.broken = true
		invariant.Violated(invariant.SpoolBroken, err.Error())
	}
}

// retryBacklog re-offers records the spool refused; it reports whether the
// backlog is empty (and shard rings may be read again).
func (s *Shell) retryBacklog() bool {
	n := 0
	for n < len(s.backlog) {
		seq, err := s.io.Spool.Append(s.backlog[n])
		if err != nil {
			if !s.io.IsFull(err) {
				s.broken = true
				invariant.Violated(invariant.SpoolBroken, err.Error())
				s.backlog = nil
				return true
			}
			break
		}
		s.appended = seq
		n++
	}
	s.backlog = s.backlog[n:]
	if len(s.backlog) == 0 {
		s.backlog = nil
	}
	return len(s.backlog) == 0
}
