package grpcapi

import (
	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/grpcmsg"
	"github.com/tollgated/tollgated/h2"
	"github.com/tollgated/tollgated/httploop"
)

// Service serves the gRPC calls of one shard's connections, on the shard's
// thread: the loop hands it each stream's message (Handle), it decides
// through the shard (Decider) and answers through the loop (Answerer).
// Everything it keeps is that thread's; nothing is locked on a decision's
// path and, once its slots and buffers have grown to the load, nothing is
// allocated.
type Service struct {
	sh     *Shared
	out    Answerer
	decide Decider
	slots  slots
	now    int64

	// The decision being made: postpone's slot. A completion that
	// arrives for another slot while it is made waits in done, and is
	// carried on once the decision returns.
	cur      int
	deciding bool
	done     []int
	postpone func() uint64 // bound once: s.slots.postpone(s.cur, s.now)

	keys    localKeys
	watches watches

	rl    grpcmsg.RateLimitRequest
	rlMsg []byte                                 // the message rl was decoded from
	calls [grpcmsg.MaxDescriptors]descriptorCall // rl's descriptors, read
	ck    grpcmsg.CheckRequest
	ready []int // slots whose key wait ended

	checkAnswer grpcmsg.CheckResponse
	frag        grpcmsg.RateLimitResponse // one descriptor's part of an answer
	req         fasthttp.Request
	buf         []byte // an answer being encoded
}

// NewService makes shard's service: out is the shard's loop, decide its
// shard, wake rings the loop (a key's binding ended on another goroutine).
func (sh *Shared) NewService(out Answerer, decide Decider, wake func()) *Service {
	s := &Service{sh: sh, out: out, decide: decide, slots: slots{max: sh.cfg.MaxHeld, gauge: &sh.stats.Held}}
	s.postpone = func() uint64 { return s.slots.postpone(s.cur, s.now) }
	s.keys.init(sh.keys, wake)
	s.watches.init(sh.cfg.Ready)
	return s
}

// Handle serves one event of a stream: a request message, or the end of
// the client's side. Its clock is Tick's, which the loop runs at the start
// of each iteration: the node's clock (the loop's reading plus the
// clock's offset), as the shard's.
func (s *Service) Handle(x *httploop.StreamCtx) {
	m := x.Request.Method
	if x.Event == h2.HalfClosed {
		s.halfClosed(x, m)
		return
	}
	switch m {
	case methodShouldRateLimit:
		s.rateLimit(x.Ref, x.Request.Message)
	case methodCheck:
		s.check(x.Ref, x.Request.Message)
	case methodHealthCheck:
		s.healthCheck(x.Ref, x.Request.Message)
	case methodHealthWatch:
		s.watch(x.Ref, x.Request.Message)
	case methodReflectionV1, methodReflectionV1Alpha:
		s.reflection(x.Ref, x.Request.Message)
	default:
		s.out.Fail(x.Ref, codeUnimplemented, "tollgated: no such method")
	}
	s.carryOn()
}

// halfClosed ends a stream whose client has sent everything: a reflection
// stream is finished; a call that sent no message is refused (one that
// did is answered, being answered, or watching). Every stream the loop
// hands the service gets its end exactly once: the loop's HTTP/2 machine
// counts it against the connection's streams until then.
func (s *Service) halfClosed(x *httploop.StreamCtx, m int) {
	switch {
	case m == methodReflectionV1 || m == methodReflectionV1Alpha:
		s.endReflection(x.Ref)
	case s.out.StreamLive(x.Ref) && !s.slots.holds(x.Ref) && s.watches.find(x.Ref) < 0:
		// Not answered, not being answered, not watching: no message
		// came. (A unary client ends its side with its message, so
		// this is rare.)
		s.out.Fail(x.Ref, codeInvalidArgument, "tollgated: the call carried no request message")
	}
}

// Complete answers the decision ticket names with fill. The call goes on
// (its next descriptor, or its answer) at the next CarryOn, Tick or
// Handle, never inside Complete: the shard completes decisions from its
// own pass (Poll: durable marks, funding news), and the call's next
// descriptor is a new decision the shard must not be asked for from inside
// that pass. A stale ticket (the call was answered 504 meanwhile) is
// ignored and reported false.
func (s *Service) Complete(ticket uint64, fill func(*fasthttp.Response)) bool {
	i := s.slots.byTicket(ticket)
	if i < 0 {
		return false
	}
	sl := s.slots.all[i]
	sl.resp.Reset()
	if fill != nil {
		fill(&sl.resp)
	}
	s.slots.decided(i)
	if s.deciding && i == s.cur {
		return true // the decision being made was completed by itself
	}
	s.done = append(s.done, i)
	return true
}

// Pending reports whether ticket names a call still waiting for its
// decision, on a stream its client has not reset or closed. A shard holding
// a request for funding drops it unbilled when it is not, as it drops an
// HTTP request whose client left: the gateway has given up (and, failing
// closed, not run the work), so billing it would charge for nothing.
func (s *Service) Pending(ticket uint64) bool {
	i := s.slots.byTicket(ticket)
	return i >= 0 && s.out.StreamLive(s.slots.all[i].ref)
}

// CarryOn continues the calls whose decisions were completed: the runner
// calls it after each pass of its shard that may complete some.
func (s *Service) CarryOn() {
	if s.deciding {
		panic("grpcapi: BUG: calls carried on while a decision is being made")
	}
	s.carryOn()
}

// carryOn continues the calls whose decisions were completed since it last
// ran.
func (s *Service) carryOn() {
	for len(s.done) > 0 {
		i := s.done[0]
		s.done = append(s.done[:0], s.done[1:]...)
		s.resume(i)
	}
}

// resume continues slot i, whose decision is in its resp, unless its
// client has left: then no further descriptor is decided for it.
func (s *Service) resume(i int) {
	sl := s.slots.all[i]
	if !s.out.StreamLive(sl.ref) {
		s.abandon(i, sl)
		return
	}
	switch sl.method {
	case methodShouldRateLimit:
		s.reread(sl)
		if s.descriptorDone(i, sl) {
			s.runDescriptors(i, sl, sl.msg)
		}
	case methodCheck:
		s.answerCheck(i, sl)
	default:
		panic("grpcapi: BUG: a held call of a method that is never held")
	}
}

// reread reads a held rate-limit call's request again from its slot, as
// it was read when the call arrived.
func (s *Service) reread(sl *slot) {
	err := s.rl.Decode(sl.msg)
	if err == nil {
		err = s.sh.rules.check(&s.rl, &s.calls)
	}
	if err != nil {
		panic("grpcapi: BUG: a held rate-limit request is no longer read as it was: " + err.Error())
	}
	s.rlMsg = sl.msg
}

// decideIn runs the shard over s.req for slot i, its answer in the
// slot's resp, and reports whether the shard postponed it.
func (s *Service) decideIn(i int, sl *slot) (postponed bool) {
	sl.resp.Reset()
	s.cur, s.deciding = i, true
	s.decide(&s.req, &sl.resp, s.postpone)
	s.deciding = false
	s.req.Reset()
	return sl.state == slotDeciding
}

// Tick runs once per loop iteration: calls held longer than the answer
// timeout are answered as the loop answers a postponed request it gives
// up on, descriptors whose key has been bound meanwhile go on, and health
// watches see the node's readiness.
func (s *Service) Tick(now int64) {
	s.now = now
	s.pollKeys(now)
	s.sweep(now)
	s.watches.tick(s.out, now)
	s.carryOn()
}

// sweepEvery is how often held calls are looked at for their timeout.
const sweepEvery = int64(100e6)

func (s *Service) sweep(now int64) {
	if now < s.slots.sweepAt || s.slots.nheld == 0 && s.keys.waiting == 0 {
		return
	}
	s.slots.sweepAt = now + sweepEvery
	for i, sl := range s.slots.all {
		switch {
		case sl.state != slotDeciding && sl.state != slotKey:
		case !s.out.StreamLive(sl.ref):
			s.abandon(i, sl)
		case now-sl.since <= s.sh.cfg.AnswerTimeout:
		case sl.state == slotDeciding:
			s.sh.stats.NoAnswer.Add(1)
			s.Complete(sl.ticket, httploop.FillAnswerTimeout)
		case sl.state == slotKey:
			s.sh.stats.NoAnswer.Add(1)
			s.keys.drop(i)
			s.finish(i, sl, codeUnavailable, "tollgated: the account's key was not bound in time; nothing was decided")
		}
	}
}

// abandon frees slot i, held for a call whose stream ended before its
// answer (the client reset it or closed its connection, or the connection
// failed): nothing more is decided for it, and its end writes nothing. A
// decision the shard still owes it finds its ticket stale; descriptors
// decided before stay billed.
func (s *Service) abandon(i int, sl *slot) {
	switch sl.state {
	case slotDeciding:
		s.slots.decided(i)
	case slotKey:
		s.keys.drop(i)
	}
	s.sh.stats.Abandoned.Add(1)
	s.finish(i, sl, codeCancelled, "")
}

// pollKeys carries on the descriptors whose key has been bound, or whose
// retry is due.
func (s *Service) pollKeys(now int64) {
	if s.keys.waiting == 0 {
		return
	}
	s.ready = s.keys.ready(now, s.sh.bearer, s.ready[:0])
	for _, i := range s.ready {
		sl := s.slots.all[i]
		if sl.state != slotKey {
			panic("grpcapi: BUG: a key waiter's slot is not waiting for a key")
		}
		if !s.out.StreamLive(sl.ref) {
			s.abandon(i, sl)
			continue
		}
		sl.state = slotRunning
		s.reread(sl)
		s.runDescriptors(i, sl, sl.msg)
	}
}

// Quiet reports whether the service has nothing due before the loop's
// idle tick: no call held and no key awaited. Watches look about once a
// second (watchEvery), on the idle tick's wake-ups, so an open Watch does
// not keep the loop awake.
func (s *Service) Quiet() bool {
	return s.slots.nheld == 0 && s.keys.waiting == 0
}

// Holding reports whether the service holds calls: a drain keeps the loop
// running for them.
func (s *Service) Holding() bool { return s.slots.nheld > 0 || s.keys.waiting > 0 }

// Drain ends the health watches (NOT_SERVING, then the end of the stream):
// a long-lived stream must not hold a graceful stop until its deadline.
func (s *Service) Drain() { s.watches.end(s.out) }

// busy refuses a call when the shard holds as many as it may.
func (s *Service) busy(ref httploop.StreamRef) {
	s.sh.stats.Busy.Add(1)
	s.out.Fail(ref, codeResourceExhausted, "tollgated: the shard holds as many calls as it may; nothing was decided, retry")
}

// Stop forgets every call held: the loop has stopped, its connections are
// closed, and no answer can reach them. Decisions the shard completes
// later find their tickets stale, so nothing more is decided for them.
func (s *Service) Stop() {
	for i, sl := range s.slots.all {
		switch sl.state {
		case slotFree:
			continue
		case slotDeciding:
			s.slots.decided(i)
		case slotKey:
			s.keys.drop(i)
		}
		s.slots.release(i)
	}
	s.done = s.done[:0]
}
