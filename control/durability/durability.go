// Package durability tracks what the control plane has written to the usage
// spool and what of it is on disk, and turns that into the messages that
// release answers: each shard's durable mark (Marks) says which of its
// events are on disk, a forwarded finish's or commit's reply is held until
// the owner's record is, and a post-paid batch is billed only once its
// events are.
//
// It also keeps the commit journal's open entries: a staged reservation's
// commit is a spool record, closed by the usage record that bills it. A
// node that dies in between bills the open ones at their quote when it
// comes back (control.Recover). The spool may drop records only below the
// oldest open commit (Floor); a commit open longer than Rejournal is
// written again, so one long reservation cannot pin the spool.
//
// The spool numbers records consecutively and only the plane appends, so
// the machine assigns each record's sequence number itself: the shell
// appends in order and the spool's numbers agree (the shell checks).
//
// A pure state machine: methods are inputs; Out receives appends,
// messages and completions; time is an argument.
package durability

import (
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

// Out is what the machine asks of its shell.
type Out interface {
	// Append writes record to the spool as sequence seq. The record is
	// only valid during the call.
	Append(seq uint64, record []byte)
	// Send queues a message for a shard.
	Send(shard int, m message.Inbound)
	// Durable reports that what Await(ticket) waited for is on disk.
	Durable(ticket uint64)
}

// Config sets the machine's policy.
type Config struct {
	Shards int
	// Next is the sequence number the spool gives the next record (its
	// last appended + 1).
	Next uint64
	// Durable is the spool's durable mark at start.
	Durable uint64
	// Rejournal: a commit open this long (ns) is written again (30 s).
	Rejournal int64
}

// Stats counts the traffic.
type Stats struct {
	Appended, HeldReplies, Rejournaled uint64
	OpenCommits                        int
}

// Machine is the durability state machine.
type Machine struct {
	cfg     Config
	out     Out
	next    uint64 // the next record's sequence
	durable uint64 // highest sequence known durable
	marks   [][]mark
	acked   []uint64 // per shard: its events up to this number are durable
	last    []uint64 // per shard: sequence of its last record
	held    []held
	open    map[core.RequestID]*openCommit
	order   []*openCommit // open commits by sequence (closed ones skipped lazily)
	stats   Stats
}

// mark: once the spool is durable up to seq, shard events up to shardSeq
// are.
type mark struct{ seq, shardSeq uint64 }

type held struct {
	seq    uint64
	to     int
	msg    message.Inbound
	ticket uint64 // Await: reported through Out.Durable instead of sending msg
}

type openCommit struct {
	id     core.RequestID
	seq    uint64
	at     int64
	record []byte
	closed bool
}

// New returns a machine continuing a spool whose next record is cfg.Next.
func New(cfg Config, out Out) *Machine {
	if cfg.Shards <= 0 {
		cfg.Shards = 1
	}
	if cfg.Next == 0 {
		cfg.Next = 1
	}
	if cfg.Rejournal <= 0 {
		cfg.Rejournal = 30e9
	}
	return &Machine{cfg: cfg, out: out, next: cfg.Next, durable: cfg.Durable,
		marks: make([][]mark, cfg.Shards), acked: make([]uint64, cfg.Shards), last: make([]uint64, cfg.Shards),
		open: make(map[core.RequestID]*openCommit)}
}

// Stats returns the counters.
func (m *Machine) Stats() Stats {
	s := m.stats
	s.OpenCommits = len(m.open)
	return s
}

// Record spools one record from shard from; shardSeq (0: none) is the
// shard's number for it, which the shard's mark (Marks) reports back.
func (m *Machine) Record(from int, shardSeq uint64, record []byte) uint64 {
	seq := m.next
	m.next++
	m.stats.Appended++
	m.out.Append(seq, record)
	if from >= 0 {
		m.last[from] = seq
		if shardSeq != 0 {
			m.marks[from] = append(m.marks[from], mark{seq: seq, shardSeq: shardSeq})
		}
	}
	return seq
}

// Commit spools a commit journal entry for request id and keeps it open
// until Closed(id).
func (m *Machine) Commit(from int, shardSeq uint64, id core.RequestID, record []byte, now int64) {
	seq := m.Record(from, shardSeq, record)
	c := &openCommit{id: id, seq: seq, at: now, record: append([]byte(nil), record...)}
	m.open[id] = c
	m.order = append(m.order, c)
}

// Closed ends request id's commit entry: its usage record was spooled.
func (m *Machine) Closed(id core.RequestID) {
	if c := m.open[id]; c != nil {
		c.closed = true
		delete(m.open, id)
	}
}

// Hold sends msg to shard to once shard src's records so far are durable
// (at once if they already are).
func (m *Machine) Hold(src, to int, msg message.Inbound) {
	if s := m.last[src]; s > m.durable {
		m.stats.HeldReplies++
		m.held = append(m.held, held{seq: s, to: to, msg: msg})
		return
	}
	m.out.Send(to, msg)
}

// Await reports ticket through Out.Durable once shard src's records so far
// are durable (at once if they already are).
func (m *Machine) Await(src int, ticket uint64) {
	if s := m.last[src]; s > m.durable {
		m.held = append(m.held, held{seq: s, ticket: ticket})
		return
	}
	m.out.Durable(ticket)
}

// AwaitAll reports ticket through Out.Durable once every record appended
// so far is durable (at once if it is).
func (m *Machine) AwaitAll(ticket uint64) {
	if s := m.next - 1; s > m.durable {
		m.held = append(m.held, held{seq: s, ticket: ticket})
		return
	}
	m.out.Durable(ticket)
}

// Durable is the spool's durable mark: every shard's mark moves to its
// last event on disk, and held replies and waits whose records are go out.
func (m *Machine) Durable(seq uint64) {
	if seq <= m.durable {
		return
	}
	m.durable = seq
	for i, ms := range m.marks {
		n := 0
		for n < len(ms) && ms[n].seq <= seq {
			n++
		}
		if n > 0 {
			m.acked[i] = ms[n-1].shardSeq
			m.marks[i] = append(ms[:0], ms[n:]...)
		}
	}
	n := 0
	for _, h := range m.held {
		if h.seq > seq {
			m.held[n] = h
			n++
			continue
		}
		if h.ticket != 0 {
			m.out.Durable(h.ticket)
		} else {
			m.out.Send(h.to, h.msg)
		}
	}
	clear(m.held[n:])
	m.held = m.held[:n]
}

// Marks are, per shard, the number of its last event on disk: the shell
// publishes each in the shard's mark (shard.DurableMark), which releases
// the answers parked on events up to it. A mark is not a ring message: with
// many shards and a few thousand syncs a second, one message per shard per
// sync was most of what the plane pushed into rings. The slice is the
// machine's; read it, do not keep it.
func (m *Machine) Marks() []uint64 { return m.acked }

// Floor is the highest sequence the spool may drop: everything below the
// oldest open commit entry, and nothing not yet durable.
func (m *Machine) Floor() uint64 {
	m.compact()
	if len(m.order) > 0 {
		return min(m.order[0].seq-1, m.durable)
	}
	return m.durable
}

// compact drops closed entries from the front of the order.
func (m *Machine) compact() {
	n := 0
	for n < len(m.order) && m.order[n].closed {
		n++
	}
	if n > 0 {
		clear(m.order[:n])
		m.order = m.order[n:]
	}
}

// Next is when Tick next has work: the oldest open commit's re-journal
// time (0: none).
func (m *Machine) Next() int64 {
	m.compact()
	if len(m.order) == 0 {
		return 0
	}
	return m.order[0].at + m.cfg.Rejournal
}

// Tick writes again the commit entries open for Rejournal, so the spool can
// drop what lies below them.
func (m *Machine) Tick(now int64) {
	for {
		m.compact()
		if len(m.order) == 0 || now-m.order[0].at < m.cfg.Rejournal {
			return
		}
		c := m.order[0]
		m.order = m.order[1:]
		c.seq, c.at = m.Record(-1, 0, c.record), now
		m.order = append(m.order, c)
		m.stats.Rejournaled++
	}
}

// Pending reports whether anything waits on the spool.
func (m *Machine) Pending() bool {
	if len(m.held) > 0 {
		return true
	}
	for _, ms := range m.marks {
		if len(ms) > 0 {
			return true
		}
	}
	return false
}
