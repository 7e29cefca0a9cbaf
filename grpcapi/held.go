package grpcapi

import (
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/httploop"
)

// A call is served in a slot from the moment its message arrives until it
// is answered. Most calls are answered before their handler returns and
// give the slot back at once; a call whose decision the shard postpones
// (its usage must reach the disk first, or its account's funding), or
// whose descriptor waits for its account's key, keeps it: it is held.
//
// A slot carries everything a held call needs to go on later, on the
// shard's thread: the request message (copied, since the stream's input
// is gone by then), which descriptor it was at, the answer's fragments so
// far, and a Response of its own into which the shard writes its decision.
//
// A postponed decision is named by a ticket the shard hands back to the
// runner's completer: ticketGRPC set, the slot's index and a sequence
// number, so that a ticket outliving its call (answered 504 meanwhile) is
// recognised as stale.

type slotState uint8

const (
	slotFree     slotState = iota
	slotRunning            // its handler, or a completion, is working on it
	slotDeciding           // the shard postponed its decision: a ticket is out
	slotKey                // a descriptor waits for its account's key
)

type slot struct {
	state  slotState
	ref    httploop.StreamRef
	method int
	ticket uint64
	since  int64 // when it was held

	// A rate-limit call's progress: the request (copied once held), the
	// descriptor being decided, the answer so far.
	msg     []byte
	next    int
	answer  []byte
	over    bool // a descriptor was over its limit
	refused bool // the first refusal's headers are in answer
	keyAt   int64
	// resp is the shard's answer to the descriptor or check being
	// decided.
	resp fasthttp.Response
}

const (
	// ticketGRPC marks a held call's ticket; httploop's own tickets leave
	// the top bit clear.
	ticketGRPC = uint64(1) << 63
	ticketSeqs = 40
)

// slots is a Service's table of calls being served.
type slots struct {
	all     []*slot // made on first use, kept
	free    []uint32
	max     int
	seq     uint64
	nheld   int           // slots whose decision the shard owes (slotDeciding)
	gauge   *atomic.Int64 // every shard's nheld, summed (Stats.Held)
	sweepAt int64         // the next look at them for the answer timeout
}

// acquire takes a free slot for a call on ref, or nil when max calls are
// being served.
func (t *slots) acquire(ref httploop.StreamRef, method int) (int, *slot) {
	var i int
	switch {
	case len(t.free) > 0:
		i = int(t.free[len(t.free)-1])
		t.free = t.free[:len(t.free)-1]
	case len(t.all) < t.max:
		i = len(t.all)
		t.all = append(t.all, new(slot))
	default:
		return -1, nil
	}
	s := t.all[i]
	if s.state != slotFree {
		panic("grpcapi: BUG: a free slot is in use")
	}
	s.state, s.ref, s.method, s.next, s.over, s.refused = slotRunning, ref, method, 0, false, false
	s.msg, s.answer = s.msg[:0], s.answer[:0]
	s.resp.Reset()
	return i, s
}

// release frees slot i.
func (t *slots) release(i int) {
	s := t.all[i]
	if s.state == slotFree {
		panic("grpcapi: BUG: a slot is released twice")
	}
	s.state, s.ticket = slotFree, 0
	t.free = append(t.free, uint32(i))
}

// postpone marks slot i as waiting for the shard and returns its ticket.
func (t *slots) postpone(i int, now int64) uint64 {
	s := t.all[i]
	if s.state != slotDeciding {
		t.seq++
		s.ticket = ticketGRPC | uint64(i)<<ticketSeqs | t.seq&(1<<ticketSeqs-1)
		s.state, s.since = slotDeciding, now
		t.nheld++
		t.gauge.Add(1)
	}
	return s.ticket
}

// decided marks slot i, whose decision the shard has just given, as
// running again.
func (t *slots) decided(i int) {
	s := t.all[i]
	if s.state != slotDeciding {
		panic("grpcapi: BUG: a decision for a slot that was not waiting for one")
	}
	s.state = slotRunning
	t.nheld--
	t.gauge.Add(-1)
}

// byTicket is the index of the slot ticket names while the shard owes it
// its decision, or -1.
func (t *slots) byTicket(ticket uint64) int {
	i := (ticket &^ ticketGRPC) >> ticketSeqs
	if ticket&ticketGRPC == 0 || i >= uint64(len(t.all)) {
		return -1
	}
	if s := t.all[i]; s.state != slotDeciding || s.ticket != ticket {
		return -1
	}
	return int(i)
}

// holds reports whether a slot serves the call on ref (a scan: for the
// rare end of a stream that is not its message's).
func (t *slots) holds(ref httploop.StreamRef) bool {
	for _, s := range t.all {
		if s.state != slotFree && s.ref == ref {
			return true
		}
	}
	return false
}

// IsTicket reports whether ticket names a call held by a Service.
func IsTicket(ticket uint64) bool { return ticket&ticketGRPC != 0 }
