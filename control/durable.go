package control

import (
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/shard"
)

// Spool is where the plane makes usage durable: spool.Spool satisfies it.
// Append must not block on disk; Durable reports the highest sequence that
// is on disk.
type Spool interface {
	Append(payload []byte) (uint64, error)
	Durable() uint64
}

// durability writes every billed event to the spool and tells each shard,
// in order, which of its events are on disk (InDurable), so the shard can
// release the answers that report them. A forwarded finish's reply waits
// here the same way.
type durability struct {
	spool   Spool
	buf     []byte
	backlog []spoolEntry // refused by a full spool; retried first, in order
	marks   [][]durableMark
	held    []heldReply
	acked   uint64 // highest durable sequence already announced
	last    []uint64
	stats   DurabilityStats
}

// DurabilityStats counts the spool traffic.
type DurabilityStats struct {
	Spooled, Backlogged, Failed, HeldReplies uint64
}

type spoolEntry struct {
	from     int
	shardSeq uint64
	payload  []byte
}

// durableMark: once the spool is durable up to global, shard events up to
// shardSeq are.
type durableMark struct{ global, shardSeq uint64 }

type heldReply struct {
	global  uint64
	src, to int // the shard whose usage it reports; the shard it answers
	msg     shard.Inbound
	then    func() // if set, run instead of sending msg
}

func newDurability(s Spool, shards int) *durability {
	return &durability{spool: s, marks: make([][]durableMark, shards), last: make([]uint64, shards)}
}

// append spools one event from shard from.
func (d *durability) append(from int, shardSeq uint64, u *ledger.Usage) {
	d.buf = appendUsageRecord(d.buf[:0], u)
	if len(d.backlog) == 0 && d.write(from, shardSeq, d.buf) {
		return
	}
	d.stats.Backlogged++
	d.backlog = append(d.backlog, spoolEntry{from: from, shardSeq: shardSeq, payload: append([]byte(nil), d.buf...)})
}

// write appends payload; false means the spool refused it for now.
func (d *durability) write(from int, shardSeq uint64, payload []byte) bool {
	g, err := d.spool.Append(payload)
	if err != nil {
		return false
	}
	d.stats.Spooled++
	d.last[from] = g
	if shardSeq != 0 {
		d.marks[from] = append(d.marks[from], durableMark{global: g, shardSeq: shardSeq})
	}
	return true
}

// retry re-offers backlogged events, oldest first.
func (d *durability) retry() {
	n := 0
	for n < len(d.backlog) {
		e := &d.backlog[n]
		if !d.write(e.from, e.shardSeq, e.payload) {
			break
		}
		n++
	}
	if n > 0 {
		clear(d.backlog[:n])
		d.backlog = append(d.backlog[:0], d.backlog[n:]...)
	}
}

// waiting reports whether shard from has an event not yet durable (or not
// yet spooled), and the sequence that will make it durable.
func (d *durability) waiting(from int) (bool, uint64) {
	for _, e := range d.backlog {
		if e.from == from {
			return true, 0
		}
	}
	return d.last[from] > d.acked, d.last[from]
}

// hold keeps a reply until the spool is durable up to global (0: until the
// shard's backlogged events are spooled and durable).
func (d *durability) hold(global uint64, src, to int, m shard.Inbound) {
	d.stats.HeldReplies++
	d.held = append(d.held, heldReply{global: global, src: src, to: to, msg: m})
}

// after runs fn once shard src's events so far are durable.
func (d *durability) after(src int, fn func()) {
	_, at := d.waiting(src)
	d.held = append(d.held, heldReply{global: at, src: src, then: fn})
}

// poll announces newly durable events to their shards and releases held
// replies. It returns how many messages it sent.
func (d *durability) poll(send func(int, shard.Inbound)) int {
	d.retry()
	g := d.spool.Durable()
	if g <= d.acked && len(d.held) == 0 {
		return 0
	}
	sent := 0
	if g > d.acked {
		d.acked = g
		for i, ms := range d.marks {
			n := 0
			for n < len(ms) && ms[n].global <= g {
				n++
			}
			if n > 0 {
				send(i, shard.Inbound{Kind: shard.InDurable, Seq: ms[n-1].shardSeq})
				sent++
				d.marks[i] = append(ms[:0], ms[n:]...)
			}
		}
	}
	n := 0
	for _, h := range d.held {
		if h.global == 0 { // was behind a backlog: it now waits for the shard's last event
			if w, at := d.waiting(h.src); w && at != 0 {
				h.global = at
			} else if !w {
				h.global = g
			}
		}
		if h.global != 0 && h.global <= g {
			if h.then != nil {
				h.then()
			} else {
				send(h.to, h.msg)
			}
			sent++
			continue
		}
		d.held[n] = h
		n++
	}
	clear(d.held[n:])
	d.held = d.held[:n]
	return sent
}

// pendingWork reports whether anything waits on the spool.
func (d *durability) pendingWork() bool {
	if len(d.backlog) > 0 || len(d.held) > 0 {
		return true
	}
	for _, ms := range d.marks {
		if len(ms) > 0 {
			return true
		}
	}
	return false
}

// leaseNamer is a Funder that knows the ledger lease behind a token.
type leaseNamer interface {
	LeaseID(account core.AccountID, token uint64) uint64
}
