package shard

import (
	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/invariant"
)

// Durable acknowledgement. With Config.AckDurable, a response that reports
// billed usage (/v1/check, /v1/finish) is not sent when the usage is
// recorded but when the control plane says the event is on disk: the shard
// parks the answer here, in usage order, and its DurableMark releases every
// answer whose event has a number up to the mark. So a client that saw 200 knows
// its usage survives kill -9.
//
// The queue is a fixed ring of fixed-size entries: parking copies the body
// and allocates nothing. Its room is claimed before any work is done (like
// the usage slot), so a full queue sheds the request instead of billing
// usage it could not acknowledge.

// ackBodyMax bounds a parked body and its kept header values. Every answer
// that reports usage fits: /v1/check's body is under 200 bytes, and
// /v1/authz's header values at most 281 (account 64, request id 32, units
// 20, reservation 20, the longest RateLimit-Policy 109, RateLimit 36) with
// no body. TestAuthzAnswerWaitsForDurableUsageWithItsHeaders parks a long
// one; a longer answer is a broken invariant (AckOversize).
const ackBodyMax = 288

// DefaultAckQueue is the parked answers one shard holds by default.
const DefaultAckQueue = 4096

// parkedHeaders are the response headers a parked answer keeps: the
// forward-auth route answers in headers (authz.go).
var parkedHeaders = [...]string{hdrAccount, hdrRequestID, hdrUnits, hdrReservation, hdrRateLimitPolicy, hdrRateLimit}

type parkedAnswer struct {
	seq    uint64 // the usage event it waits for
	ticket uint64
	status uint16
	n      uint16                     // body bytes, after the header values
	hn     [len(parkedHeaders)]uint16 // length of each kept header's value
	body   [ackBodyMax]byte
}

type ackQueue struct {
	q          []parkedAnswer // len is a power of two
	head, tail uint64         // head: oldest parked; tail: next free
	claimed    int            // room promised to requests in progress
	cur        *parkedAnswer  // the answer being written by fill
}

func newAckQueue(n int) ackQueue {
	size := 1
	for size < n {
		size <<= 1
	}
	return ackQueue{q: make([]parkedAnswer, size)}
}

// claim promises room for one parked answer, or reports the queue full.
func (a *ackQueue) claim() bool {
	if int(a.tail-a.head)+a.claimed >= len(a.q) {
		return false
	}
	a.claimed++
	return true
}

// claimAck reserves room to park an answer, when answers wait for
// durability; it reports false when the queue is full.
func (s *Shard) claimAck(r *Request) bool {
	if !s.ackDurable(r) {
		return true
	}
	return s.acks.claim()
}

func (s *Shard) ackDurable(r *Request) bool { return s.cfg.AckDurable && r.Defer != nil }

// respond sends the answer in resp now, or, if it reports usage event seq
// and answers must wait for durability, parks it (using the room claimed).
// seq 0 means the answer reports no new usage.
func (s *Shard) respond(r *Request, seq uint64) {
	keepHeaders := s.answerHeaders
	s.answerHeaders = false
	if !s.ackDurable(r) {
		return
	}
	a := &s.acks
	a.claimed--
	if seq == 0 {
		return
	}
	body := r.Resp.Body()
	p := &a.q[a.tail&uint64(len(a.q)-1)]
	off := 0
	for i, name := range parkedHeaders {
		if !keepHeaders {
			// Only the forward-auth answer sets them; looking each
			// up on every parked check was most of what parking cost.
			p.hn[i] = 0
			continue
		}
		v := r.Resp.Header.Peek(name)
		if off+len(v) > ackBodyMax {
			off = ackBodyMax + 1
			break
		}
		p.hn[i] = uint16(copy(p.body[off:], v))
		off += len(v)
	}
	if off+len(body) > ackBodyMax {
		// Cannot happen for the answers we write; answer now rather than
		// truncate.
		invariant.Violated(invariant.AckOversize, "an answer waiting for durable usage is larger than its slot")
		return
	}
	p.seq, p.status, p.n = seq, uint16(r.Resp.StatusCode()), uint16(copy(p.body[off:], body))
	p.ticket = r.Defer()
	a.tail++
}

// durable releases every parked answer whose usage event is ≤ seq.
func (s *Shard) durable(seq uint64) {
	a := &s.acks
	for a.head != a.tail {
		p := &a.q[a.head&uint64(len(a.q)-1)]
		if p.seq > seq {
			return
		}
		a.cur = p
		s.complete(p.ticket, s.fillAck)
		a.cur = nil
		a.head++
	}
}

// seqSince is the usage event sent since before was read, or 0 if none was.
func (s *Shard) seqSince(before uint64) uint64 {
	if s.usageSeq == before {
		return 0
	}
	return s.usageSeq
}

func (s *Shard) writeAck(resp *fasthttp.Response) {
	p := s.acks.cur
	resp.SetStatusCode(int(p.status))
	off := 0
	for i, name := range parkedHeaders {
		if n := int(p.hn[i]); n > 0 {
			resp.Header.SetBytesV(name, p.body[off:off+n])
			off += n
		}
	}
	if p.n > 0 {
		resp.Header.SetContentTypeBytes(applicationJSON)
	}
	resp.SetBody(p.body[off : off+int(p.n)])
}
