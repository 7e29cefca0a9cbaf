package shard

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/invariant"
)

// Completer answers a parked request: the transport calls fill with the
// request's response, in order with the connection's other responses, or
// skips it if the connection has gone.
type Completer func(ticket uint64, fill func(*fasthttp.Response))

// SetCompleter wires the transport that parks forwarded requests.
func (s *Shard) SetCompleter(c Completer) {
	// The shard completes through the latency recorder (latency.go).
	s.complete = s.lat.timeCompletions(c)
	s.fillReply = s.writeReply // bound once: completing allocates nothing
}

// SetPending wires the transport's answer to "is this parked request's
// client still waiting?", so a request waiting for funding whose client
// has gone is dropped instead of being admitted and billed.
func (s *Shard) SetPending(pending func(ticket uint64) bool) { s.pending = pending }

// Poll applies every message waiting from the control plane, then ships
// pending refill requests and retired leases. The shard's loop calls it when
// the inbox doorbell rings and once per iteration; it returns how many
// messages it applied.
func (s *Shard) Poll(now int64) int {
	s.polling = true
	s.flushPending()
	n := 0
	for {
		k := s.inbox.Ring().PopBatch(s.inbuf[:])
		for i := range k {
			s.apply(&s.inbuf[i], now)
			s.inbuf[i] = message.Inbound{} // drop references the ring would keep alive
		}
		n += k
		if k < len(s.inbuf) {
			break
		}
	}
	s.applyMark()
	s.engine.Expire(now)
	if len(s.waits.order) > 0 {
		s.runWaiters(now)
	}
	s.applyReclaims()
	s.flushRefills(now)
	if now >= s.keysReportAt {
		s.reportKeysUsed(now)
	}
	s.polling = false
	return n
}

// reportKeysUsed sends the principals of keys used since the last report
// (every Config.KeyUseReport: a key's last use is known to within that plus
// the plane's batching, plane.Config.KeyUseFlush),
// as far as the ring has room beyond what usage reserves; the rest stay
// marked in the cache for the next report.
func (s *Shard) reportKeysUsed(now int64) {
	s.keysReportAt = now + s.cfg.KeyUseReport
	s.cache.TakeUsed(func(p core.Principal) bool {
		return s.trySend(message.Outbound{Kind: message.OutKeyUsed, From: s.cfg.ID, Principal: p})
	})
}

func (s *Shard) apply(m *message.Inbound, now int64) {
	switch m.Kind {
	case message.InInstall:
		if err := s.engine.Install(m.Snap); err != nil {
			invariant.Violated(invariant.InstallRefused, err.Error())
		}
		s.fundingNews(m.Snap.Account)
	case message.InBind:
		if err := s.engine.Bind(m.Principal, m.Account); err == nil {
			s.keys[m.Principal] = m.Digest
		} else {
			invariant.Violated(invariant.InstallRefused, err.Error())
		}
	case message.InUnbind:
		s.engine.Unbind(m.Principal)
		delete(s.keys, m.Principal)
		s.cache.Forget(m.Principal)
	case message.InGrant:
		s.applyGrant(m)
		s.grantSeq[m.Account] = m.Seq
		s.fundingNews(m.Account)
	case message.InEvidence:
		s.engine.SetEvidence(m.Account, m.Evidence)
		s.fundingNews(m.Account)
	case message.InReclaimLease:
		// After the waiters run (applyReclaims): a grant that came in
		// the same batch funds the request that waited for it first.
		// Retires wait the same way.
		s.reclaims = append(s.reclaims, *m)
	case message.InRetireLease:
		s.reclaims = append(s.reclaims, *m) // after the waiters, as a reclaim
	case message.InFundingNews:
		// The plane lowered the account's evidence, which shards read
		// without a message: this one wakes the loop for the waiters.
		s.fundingNews(m.Account)
	case message.InExtendLease:
		if l, err := s.engine.Lease(m.Account); err == nil {
			l.Extend(m.Token, m.Until)
			s.fundingNews(m.Account)
		}
	case message.InForward:
		out := s.runOp(m.Op, core.ReservationFromID(m.Res), m.Principal, m.Units, now)
		s.sendReliably(message.Outbound{Kind: message.OutReply, Op: m.Op, From: s.cfg.ID, To: m.From, Ticket: m.Ticket,
			Status: uint16(out.code), Reason: out.reason, Units: out.billed})
		s.outbox.Notify() // the forwarder's client is waiting
	case message.InReply:
		s.reply = opOutcome{code: outcomeCode(m.Status), reason: m.Reason, billed: m.Units}
		s.replyOp = m.Op
		s.complete(m.Ticket, s.fillReply)
	case message.InReady:
		s.ready = true
	case message.InBindPlatform:
		s.platform[m.Principal] = m.Digest
	case message.InPostPaidDone:
		s.postPaidDone(m.Ticket, m.Batch)
	case message.InUnbindPlatform:
		delete(s.platform, m.Principal)
		s.cache.Forget(m.Principal)
	case message.InShare:
		if s.engine.SetShare(m.Account, m.Share) == nil {
			s.sendReliably(message.Outbound{Kind: message.OutShareAck, From: s.cfg.ID, Account: m.Account, Seq: m.Seq,
				InFlight: s.engine.AccountInFlight(m.Account)})
		}
	default:
		invariant.Violated(invariant.UnknownKind, "the plane sent a message of a kind this shard does not know")
	}
}

// fundingNews wakes the requests waiting for account's funding.
func (s *Shard) fundingNews(account core.AccountID) {
	if len(s.waits.order) > 0 {
		s.waits.wake(account)
	}
}

func (s *Shard) writeReply(resp *fasthttp.Response) { s.answerOp(resp, s.replyOp, s.reply) }

// fail answers a parked request with a refusal, when it could not even be
// forwarded.
func (s *Shard) fail(ticket uint64, r core.DenyReason) {
	s.reply = opOutcome{code: outcomeDenied, reason: r}
	s.complete(ticket, s.fillReply)
}

// flushRefills ships the engine's refill requests, share starvation and
// the units of retired leases that fund nothing any more to the control
// plane; none is dropped (outbox.go).
func (s *Shard) flushRefills(now int64) {
	s.refills = s.engine.DrainRefills(s.refills[:0])
	for _, r := range s.refills {
		if r.RateStarved && now-s.starvedAt[r.Account] >= starveReportEvery {
			// The plane only needs to know a shard starved recently
			// (within its starve window); one report per interval keeps
			// a flood of refusals from filling the ring.
			s.starvedAt[r.Account] = now
			s.sendReliably(message.Outbound{Kind: message.OutStarved, From: s.cfg.ID, Account: r.Account})
		}
		if r.WantsFunds {
			s.sendReliably(message.Outbound{Kind: message.OutRefill, From: s.cfg.ID, Account: r.Account, Units: r.Units,
				Needed: r.Needed, Seq: s.grantSeq[r.Account]})
		}
		if r.ReturnDue {
			s.returnRetired(r.Account)
		}
	}
}

// starveReportEvery bounds how often a shard reports one account's share
// as starved (ns): well inside the plane's 250 ms starve window.
const starveReportEvery = 25e6

// applyReclaims hands back what the reclaims of this Poll ask for.
func (s *Shard) applyReclaims() {
	for i := range s.reclaims {
		m := &s.reclaims[i]
		if m.Kind == message.InRetireLease {
			s.retireLease(m.Account, m.Token)
		} else {
			s.reclaimLease(m.Account, m.Token)
		}
		s.reclaims[i] = message.Inbound{}
	}
	s.reclaims = s.reclaims[:0]
}

// reclaimLease hands back unspent lease units of account: the current
// lease's if token is 0 or names it (the lease stays current: the control
// plane is moving units between shards), and every retired lease that
// funds no reservation any more.
func (s *Shard) reclaimLease(account core.AccountID, token uint64) {
	l, err := s.engine.Lease(account)
	if err != nil {
		return
	}
	if token == 0 || token == l.Token() {
		ret := l.Reclaim()
		s.returnUnits(account, ret.Token, ret.Units)
	}
	s.returnRetired(account)
}

// retireLease stops using lease token of account, which the control plane
// is handing back: its unspent units go back now, and what its
// reservations leave when they settle follows on its own (ReturnDue).
func (s *Shard) retireLease(account core.AccountID, token uint64) {
	l, err := s.engine.Lease(account)
	if err != nil {
		return
	}
	ret := l.Retire(token)
	s.returnUnits(account, ret.Token, ret.Units)
	s.returnRetired(account)
}

// returnRetired returns the units of account's retired leases that fund
// nothing any more.
func (s *Shard) returnRetired(account core.AccountID) {
	l, err := s.engine.Lease(account)
	if err != nil {
		return
	}
	s.retired = l.TakeRetired(s.retired[:0])
	for _, ret := range s.retired {
		s.returnUnits(account, ret.Token, ret.Units)
	}
}

// Quiesce ends every reservation still live — pending ones free, committed
// ones billed at their quote — for shutdown, once the loop has stopped and
// no client can commit, finish or cancel any more.
func (s *Shard) Quiesce() int {
	n := s.engine.EndAll()
	s.flushRefills(0)
	return n
}

// applyGrant adds funding. A grant the slot cannot take — every retiring
// place still funds reservations, or the account is gone — is handed
// straight back, so the plane never counts units as out in a shard that
// does not hold them. Retired leases that fund nothing are returned first
// to make room.
func (s *Shard) applyGrant(m *message.Inbound) {
	err := s.engine.GrantLease(m.Account, m.Token, m.Units, m.Until, m.LowWater)
	if errors.Is(err, core.ErrRetiringFull) {
		s.reclaimLease(m.Account, ^uint64(0)) // retired ones only: no current lease has that token
		err = s.engine.GrantLease(m.Account, m.Token, m.Units, m.Until, m.LowWater)
	}
	if err != nil {
		// The units go straight back: the plane must never count units
		// as out in a shard that does not hold them.
		s.returnUnits(m.Account, m.Token, m.Units)
		if !errors.Is(err, core.ErrRetiringFull) {
			// Retiring places all still funding reservations is a state
			// the plane cannot see; anything else (a stale fencing token,
			// an unknown account, an overflow) is a grant it should never
			// have sent.
			invariant.Violated(invariant.GrantRefused, err.Error())
		}
	}
}
