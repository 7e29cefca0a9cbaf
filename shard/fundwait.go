package shard

import (
	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/core"
)

// Funding waits.
//
// A refusal for lease-unavailable, lease-expired or lease-exhausted says
// nothing about the account's money. It says this shard's slice of it has
// run out or has not come yet — after start, after an idle account's lease
// was handed back, near exhaustion while the next small lease is fetched —
// and the refill it triggered is already on its way, usually within a few
// milliseconds. Answering 503 would make every client carry a retry loop
// for a gap the server closes by itself, so the shard parks such a request
// for at most Config.FundingWait and runs it again when news of its
// account's funding arrives (a grant, funding evidence, a new snapshot) or
// when its deadline passes, and then answers whatever the engine says.
//
// A waiting request holds no reservation, no usage slot and no room in the
// acknowledgement queue: only a copy of its decoded body in a fixed table.
// When the table is full, requests are refused at once, as without waits.
// A waiter whose client has gone (SetPending says so) is dropped unrun, and
// one whose key now resolves to another snapshot is refused, not re-read.
// A refusal that waits is not counted as one (Engine.UncountDenial): the
// lease-* denial counters count refused answers, not attempts.

const (
	// DefaultFundingWait bounds a funding wait (ns). The deadline is
	// looked at once per loop iteration, so a request may wait up to one
	// loop Tick longer.
	DefaultFundingWait = 200e6
	// DefaultFundingWaiters is the requests one shard holds waiting.
	DefaultFundingWaiters = 256
	// NoFundingWait turns funding waits off (Config.FundingWait).
	NoFundingWait = -1
)

// fundingWaiter is one parked request: enough to run it again without its
// body, which the connection does not keep.
type fundingWaiter struct {
	ticket   uint64 // 0: a free slot
	deadline int64
	// snap is the snapshot its body was decoded under: operation indices
	// and permission bits mean something only under it. A generation is
	// per account, so after a rebind to another account a generation
	// match would read the body under a different price list.
	snap      *core.Snapshot
	account   core.AccountID
	principal core.Principal
	reason    core.DenyReason // the refusal it waits out
	mode      admitMode
	capture   bool
	due       bool // funding news for its account arrived
	// evidence is the account's funding evidence as of the last attempt:
	// the control plane publishes a refusal there (balance exhausted)
	// without a message, so a new version is news too.
	evidence *core.EvidenceCell
	seen     uint64
	perms    core.PermissionSet
	ttl      int64
	n        int
	work     [MaxWorkLines]core.WorkItem
	authz    authzWork
}

// body returns the decoded body, if the request's snapshot is still the
// very snapshot it was decoded under (same account, same generation).
func (w *fundingWaiter) body(snap *core.Snapshot) (admitBody, bool) {
	if snap != w.snap {
		return admitBody{}, false
	}
	return admitBody{work: w.work[:w.n], perms: w.perms, ttl: w.ttl, capture: w.capture, authz: w.authz}, true
}

// fundingWaits is the fixed table of waiters and their park order, which
// is the order they run again in, so the first to wait is the first funded.
type fundingWaits struct {
	slots []fundingWaiter
	order []int // live slots, oldest first
	free  []int
}

func newFundingWaits(n int) fundingWaits {
	w := fundingWaits{slots: make([]fundingWaiter, n), order: make([]int, 0, n), free: make([]int, n)}
	for i := range w.free {
		w.free[i] = n - 1 - i
	}
	return w
}

func (f *fundingWaits) take() *fundingWaiter {
	if len(f.free) == 0 {
		return nil
	}
	i := f.free[len(f.free)-1]
	f.free = f.free[:len(f.free)-1]
	f.order = append(f.order, i)
	return &f.slots[i]
}

// wake marks account's waiters due.
func (f *fundingWaits) wake(account core.AccountID) {
	for _, i := range f.order {
		if w := &f.slots[i]; w.account == account {
			w.due = true
		}
	}
}

func evidenceVersion(c *core.EvidenceCell) uint64 {
	if c == nil {
		return 0
	}
	return c.Version()
}

func waitsForFunding(r core.DenyReason) bool {
	return r == core.DenyLeaseUnavailable || r == core.DenyLeaseExpired || r == core.DenyLeaseExhausted
}

// waitForFunding parks a request the engine refused for want of funding
// here, or keeps a waiter that is being run again parked; it reports false
// when the refusal must be answered now.
func (s *Shard) waitForFunding(r *Request, p core.Principal, ctx *core.RequestContext, a *admitBody,
	mode admitMode, d core.Denial, again *fundingWaiter) bool {
	if !waitsForFunding(d.Reason) || r.Defer == nil || s.cfg.FundingWait < 0 {
		return false
	}
	if again != nil {
		if r.Now >= again.deadline {
			return false
		}
		s.engine.UncountDenial(d.Reason)
		again.due = false
		// The cell may have been attached since the request parked.
		again.evidence = s.engine.Evidence(ctx.Account())
		again.seen = evidenceVersion(again.evidence)
		s.waitKept = true
		return true
	}
	w := s.waits.take()
	if w == nil {
		s.waitsFull++
		return false
	}
	s.engine.UncountDenial(d.Reason)
	ev := s.engine.Evidence(ctx.Account())
	*w = fundingWaiter{ticket: r.Defer(), deadline: r.Now + s.cfg.FundingWait, snap: ctx.Snapshot(),
		account: ctx.Account(), principal: p, reason: d.Reason, mode: mode, evidence: ev,
		seen: evidenceVersion(ev), perms: a.perms, ttl: a.ttl, capture: a.capture, authz: a.authz}
	w.n = copy(w.work[:], a.work)
	s.waited++
	return true
}

// runWaiters runs again every waiter whose account had funding news or
// whose deadline has passed, oldest first. Running one never parks a new
// waiter (answers go out through the loop's ready list, not by serving the
// connection's next request here), so order is not appended to meanwhile.
func (s *Shard) runWaiters(now int64) {
	f := &s.waits
	kept := f.order[:0]
	for _, i := range f.order {
		w := &f.slots[i]
		if s.pending != nil && !s.pending(w.ticket) {
			// Its client is gone (closed, or answered 504 by the
			// transport): running it now would bill work nobody waits
			// for, and a client that retried elsewhere would pay twice.
			s.waitsAbandoned++
			*w = fundingWaiter{}
			f.free = append(f.free, i)
			continue
		}
		due := w.due || now >= w.deadline || evidenceVersion(w.evidence) != w.seen
		if due && !s.runWaiter(w, now) {
			*w = fundingWaiter{}
			f.free = append(f.free, i)
			continue
		}
		kept = append(kept, i)
	}
	f.order = kept
}

// runWaiter runs w's request again and answers it, unless it is to keep
// waiting (then it reports true). The answer goes out now, or once its
// usage is durable when it reports billed usage and answers wait for that.
func (s *Shard) runWaiter(w *fundingWaiter, now int64) bool {
	s.waiting = w
	s.waitKept = false
	// Every answer sets a body, so only the header is reset: Reset would
	// hand the body's buffer back to fasthttp's pool and take it again.
	s.waitResp.Header.Reset()
	s.waitReq.Now = now
	tail := s.acks.tail
	s.runAdmit(&s.waitReq, w.principal, w.mode, w)
	s.waiting = nil
	switch {
	case s.waitKept:
		return true
	case s.acks.tail == tail: // not parked for durability: answer now
		if now >= w.deadline && s.waitResp.StatusCode() == fasthttp.StatusServiceUnavailable {
			s.waitsExpired++
		}
		s.complete(w.ticket, s.fillWaiter)
	}
	return false
}

// waitTicket is the waitReq's Defer: a request run again is already
// deferred, under the waiter's ticket.
func (s *Shard) waitTicket() uint64 { return s.waiting.ticket }

func (s *Shard) writeWaiter(resp *fasthttp.Response) { s.waitResp.CopyTo(resp) }
