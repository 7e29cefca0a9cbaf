package node

import (
	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/handover"
	"github.com/tollgated/tollgated/httploop"
)

// desk is where a shard's thread serves the calls handed over through its
// port (handover): it takes them from the port, runs each through the
// shard as a request read from a socket, and holds the ones whose answer
// the shard postpones (durable acknowledgement, a wait for funding) until
// the shard completes them or they wait longer than the loop lets a
// postponed answer wait.
//
// A postponed call is named by a ticket the shard hands back to the
// runner's completer: deskTicket set, the call's slot, and a sequence
// number, so a ticket outliving its call (answered 504 meanwhile) is
// recognised as stale. httploop's own tickets never have deskTicket set
// (its slots stay below 2^23).
type desk struct {
	port    *handover.Port
	batch   [32]*handover.Call
	slots   []deskSlot // postponed calls, by slot
	free    []uint32
	seq     uint64
	timeout int64 // ns a postponed call may wait before it is answered 504
	sweepAt int64 // the next look for calls past their timeout

	cur       uint32 // the slot of the call being served
	curTaken  bool   // the call being served was postponed
	curTicket uint64 // its ticket, once postponed
}

type deskSlot struct {
	call   *handover.Call
	ticket uint64
	since  int64
}

const (
	deskTicket = uint64(1) << 63
	deskSeqs   = 40
	// deskSweep is how often postponed calls are looked at for their
	// timeout; the loop answers its own postponed requests on a sweep of
	// about the same cadence (httploop.Config.Tick).
	deskSweep = int64(100e6)
)

// newDesk makes a desk for capacity calls at once; its timeout is the
// loop's (set once the loop exists).
func newDesk(port *handover.Port, capacity int) *desk {
	d := &desk{port: port, slots: make([]deskSlot, capacity), free: make([]uint32, capacity)}
	for i := range d.free {
		d.free[i] = uint32(capacity - 1 - i)
	}
	return d
}

// isDeskTicket reports whether ticket names a handed-over call.
func isDeskTicket(ticket uint64) bool { return ticket&deskTicket != 0 }

// serveAll serves every call waiting in the port with serve, which runs
// the shard over the call's request and response.
func (d *desk) serveAll(serve func(c *handover.Call)) {
	for {
		n := d.port.Take(d.batch[:])
		for i, c := range d.batch[:n] {
			d.batch[i] = nil
			d.serveOne(c, serve)
		}
		if n < len(d.batch) {
			return
		}
	}
}

func (d *desk) serveOne(c *handover.Call, serve func(c *handover.Call)) {
	if len(d.free) == 0 {
		// The sender bounds its calls in flight to the desk's size, but
		// a call it stopped waiting for (handover.ErrNoAnswer) may still
		// hold a slot here until it is answered: refuse, undecided.
		c.Fail(handover.ErrFull)
		return
	}
	i := d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	d.cur, d.curTaken = i, false
	d.slots[i].call = c
	serve(c)
	if d.curTaken {
		// Held under its ticket: complete answers it, possibly already
		// (a handler may complete its own postponed answer).
		return
	}
	d.slots[i] = deskSlot{}
	d.free = append(d.free, i)
	c.Done()
}

// postpone is the Defer of the call being served: it keeps the call in its
// slot and returns the slot's ticket (the same one if called again).
func (d *desk) postpone(now int64) uint64 {
	if !d.curTaken {
		s := &d.slots[d.cur]
		d.seq++
		s.ticket = deskTicket | uint64(d.cur)<<deskSeqs | d.seq&(1<<deskSeqs-1)
		s.since = now
		d.curTaken, d.curTicket = true, s.ticket
	}
	// The same ticket, even once a handler has completed it meanwhile.
	return d.curTicket
}

// slotOf returns the index of the slot ticket names while its call is
// postponed, or -1.
func (d *desk) slotOf(ticket uint64) int {
	i := (ticket &^ deskTicket) >> deskSeqs
	if i >= uint64(len(d.slots)) {
		return -1
	}
	if s := &d.slots[i]; s.call == nil || s.ticket != ticket {
		return -1
	}
	return int(i)
}

// complete answers the postponed call ticket names with fill; a stale
// ticket is ignored.
func (d *desk) complete(ticket uint64, fill func(*fasthttp.Response)) bool {
	i := d.slotOf(ticket)
	if i < 0 {
		return false
	}
	c := d.slots[i].call
	c.Resp.Reset()
	if fill != nil {
		fill(&c.Resp)
	}
	d.release(i)
	c.Done()
	return true
}

// pending reports whether ticket names a call still waiting for its answer.
func (d *desk) pending(ticket uint64) bool { return d.slotOf(ticket) >= 0 }

func (d *desk) release(i int) {
	d.slots[i] = deskSlot{}
	d.free = append(d.free, uint32(i))
}

// held reports how many calls are postponed.
func (d *desk) held() int { return len(d.slots) - len(d.free) }

// sweep answers 504 to postponed calls older than the timeout, as the loop
// answers its own postponed requests.
func (d *desk) sweep(now int64) {
	if now < d.sweepAt || d.held() == 0 {
		return
	}
	d.sweepAt = now + deskSweep
	for i := range d.slots {
		s := &d.slots[i]
		if s.call != nil && now-s.since > d.timeout {
			d.complete(s.ticket, httploop.FillAnswerTimeout)
		}
	}
}

// close ends every call the desk holds or the port still queues: the
// shard will not answer them. A queued call was never served: it fails
// undecided. A held one was served and may have billed (its answer waited
// for the disk, or for another shard): it is answered 504 answer-timeout,
// outcome unknown, as the loop answers a postponed request it gives up on.
func (d *desk) close() {
	d.port.Close()
	for i := range d.slots {
		if s := &d.slots[i]; s.call != nil {
			d.complete(s.ticket, httploop.FillAnswerTimeout)
		}
	}
}
