package shard

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

// Request is one HTTP exchange as the shard sees it: the parsed request,
// the response to fill, the loop iteration's clock reading, and a way to
// answer later (for operations on another shard's reservation).
type Request struct {
	Req   *fasthttp.Request
	Resp  *fasthttp.Response
	Now   int64
	Defer func() uint64 // parks the response; returns a ticket for Complete
}

var (
	pathCheck  = []byte("/v1/check")
	pathAdmit  = []byte("/v1/admit")
	pathCommit = []byte("/v1/commit")
	pathFinish = []byte("/v1/finish")
	pathCancel = []byte("/v1/cancel")
	pathLivez  = []byte("/livez")
	pathReadyz = []byte("/readyz")
	bearer     = []byte("Bearer ")
)

// Serve answers one data-plane request.
func (s *Shard) Serve(r *Request) {
	path := r.Req.URI().Path()
	post := r.Req.Header.IsPost()
	switch {
	case bytes.Equal(path, pathCheck) && post:
		s.serveAdmit(r, true)
	case bytes.Equal(path, pathAdmit) && post:
		s.serveAdmit(r, false)
	case bytes.Equal(path, pathCommit) && post:
		s.serveReservation(r, OpCommit)
	case bytes.Equal(path, pathFinish) && post:
		s.serveReservation(r, OpFinish)
	case bytes.Equal(path, pathCancel) && post:
		s.serveReservation(r, OpCancel)
	case bytes.Equal(path, pathAdmission):
		s.serveAdmission(r)
	case bytes.Equal(path, pathUsage):
		s.servePostPaid(r)
	case isAuthzPath(path):
		s.serveAuthz(r)
	case bytes.Equal(path, pathLivez):
		s.writeJSON(r.Resp, fasthttp.StatusOK, append(s.out[:0], `{"status":"live"}`...))
	case bytes.Equal(path, pathReadyz):
		if s.ready {
			s.writeJSON(r.Resp, fasthttp.StatusOK, append(s.out[:0], `{"status":"ready"}`...))
		} else {
			s.writeProblem(r.Resp, fasthttp.StatusServiceUnavailable, "not-ready", "Shard has not received its state yet")
		}
	case isRoute(path):
		s.writeProblem(r.Resp, fasthttp.StatusMethodNotAllowed, "method-not-allowed", "Use POST")
	default:
		s.writeProblem(r.Resp, fasthttp.StatusNotFound, "not-found", "No such route")
	}
}

func isRoute(p []byte) bool {
	return bytes.Equal(p, pathCheck) || bytes.Equal(p, pathAdmit) || bytes.Equal(p, pathCommit) ||
		bytes.Equal(p, pathFinish) || bytes.Equal(p, pathCancel)
}

// authenticate resolves the bearer key to a principal.
func (s *Shard) authenticate(req *fasthttp.Request, now int64) (core.Principal, bool) {
	h := req.Header.Peek(fasthttp.HeaderAuthorization)
	if !bytes.HasPrefix(h, bearer) {
		return core.Principal{}, false
	}
	return s.keyPrincipal(h[len(bearer):], now)
}

// keyPrincipal resolves a customer key to a principal: from the cache, or
// by computing its digest and comparing it in full with the stored one.
func (s *Shard) keyPrincipal(key []byte, now int64) (core.Principal, bool) {
	if p, ok := s.cache.Lookup(key, now); ok {
		return p, true
	}
	d, err := s.hasher.Digest(key)
	if err != nil {
		return core.Principal{}, false
	}
	p := d.Principal()
	stored, ok := s.keys[p]
	if !ok || !credential.Equal(&stored, &d) {
		return core.Principal{}, false
	}
	s.cache.Store(key, p, now+s.cfg.CredentialTTL)
	return p, true
}

// serveAdmit runs the staged path for /v1/admit, and for /v1/check also
// commits and finishes at the quote in the same request.
func (s *Shard) serveAdmit(r *Request, oneShot bool) {
	p, ok := s.authenticate(r.Req, r.Now)
	if !ok {
		s.engine.CountDenial(core.DenyUnknownPrincipal)
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyUnknownPrincipal})
		return
	}
	mode := modeAdmit
	if oneShot {
		mode = modeCheck
	}
	s.runAdmit(r, p, mode, nil)
}

// admitMode is what runAdmit does once the engine admits, and how it
// answers.
type admitMode uint8

const (
	modeAdmit admitMode = iota // reserve; answer the reservation (/v1/admit)
	modeCheck                  // commit and bill the quote; answer in JSON (/v1/check)
	modeAuthz                  // commit, and bill unless the route captures; answer in headers (/v1/authz)
)

// runAdmit is the staged path after authentication, in the contract's
// order: begin → reserve a usage slot → decode the body (or match the
// forwarded request's route) under the pinned snapshot → admit (→ capacity
// → commit → finish for a one-shot check). w is nil for a request off the
// wire; for a request run again after waiting for funding it is the waiter,
// which carries the work decoded the first time.
func (s *Shard) runAdmit(r *Request, p core.Principal, mode admitMode, w *fundingWaiter) {
	now := r.Now
	ctx, reason := s.engine.Begin(p, 0, now)
	if reason.Denied() {
		s.writeDenial(r.Resp, core.Denial{Reason: reason})
		return
	}
	if !s.reserveUsage() {
		s.engine.CountDenial(core.DenyAccountingBackpressure)
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyAccountingBackpressure})
		return
	}
	if mode != modeAdmit {
		if !s.claimAck(r) {
			s.Release()
			s.engine.CountDenial(core.DenyAccountingBackpressure)
			s.writeDenial(r.Resp, core.Denial{Reason: core.DenyAccountingBackpressure})
			return
		}
		seq := s.usageSeq
		defer func() { s.respond(r, s.seqSince(seq)) }()
	}
	var a admitBody
	if w == nil && mode == modeAuthz {
		var ok bool
		if a, ok = s.routeWork(r, ctx.Snapshot()); !ok {
			s.Release()
			return
		}
	} else if w == nil {
		var problem string
		if a, problem = s.decodeAdmit(r.Req.Body(), ctx.Snapshot()); problem != "" {
			s.Release()
			s.writeProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-body", problem)
			return
		}
		if a.unknownPermission {
			s.Release()
			s.engine.CountDenial(core.DenyMissingPermission)
			s.writeDenial(r.Resp, core.Denial{Reason: core.DenyMissingPermission})
			return
		}
	} else {
		var current bool
		if a, current = w.body(ctx.Snapshot()); !current {
			// The policy changed, or the key now acts for another
			// account: the body was resolved under another snapshot.
			// Answer the refusal it waited on; a retry is decoded afresh.
			s.Release()
			s.writeDenial(r.Resp, core.Denial{Reason: w.reason})
			return
		}
	}
	if reason := s.engine.Require(&ctx, a.perms); reason.Denied() {
		s.Release()
		s.writeDenial(r.Resp, core.Denial{Reason: reason})
		return
	}
	if a.ttl > 0 {
		ctx.SetTTL(a.ttl)
	}
	res, d := s.engine.Admit(&ctx, a.work, s, now)
	s.flushRefills()
	if d.Denied() {
		if !s.waitForFunding(r, p, &ctx, &a, mode, d, w) {
			if d.RetryAfter == 0 && d.PeriodEnd > now {
				// The budget's next period brings a new allowance.
				d.RetryAfter = d.PeriodEnd - now
			}
			s.writeDenial(r.Resp, d)
			if mode == modeAuthz {
				s.writeRateLimit(r.Resp, &ctx, d)
			}
		}
		return
	}
	quote := s.engine.Quote(res)
	if mode == modeAdmit {
		b := append(s.out[:0], `{"reservation":"`...)
		b = appendReservation(b, s.cfg.ID, res)
		b = append(b, `","quote":`...)
		b = strconv.AppendUint(b, uint64(quote), 10)
		b = append(b, `,"expires_at":"`...)
		b = time.Unix(0, s.engine.Deadline(res)).UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, `"}`...)
		s.writeJSON(r.Resp, fasthttp.StatusOK, b)
		return
	}
	id := s.requestID(now)
	if err := s.engine.AcquireCapacity(res); err != nil {
		s.writeDenial(r.Resp, core.Denial{Reason: core.ReasonOf(err)})
		return
	}
	if err := s.engine.Commit(res, id, now); err != nil {
		s.writeDenial(r.Resp, core.Denial{Reason: core.ReasonOf(err)})
		return
	}
	if !a.capture {
		s.engine.Finish(res, quote, now)
	}
	if mode == modeAuthz {
		s.writeAuthzAllowed(r.Resp, &ctx, res, id, quote, a.capture)
		return
	}
	b := append(s.out[:0], `{"decision":"admit","request_id":"`...)
	b = id.AppendHex(b)
	b = append(b, `","units":`...)
	b = strconv.AppendUint(b, uint64(quote), 10)
	b = append(b, `,"policy_revision":"`...)
	b = ctx.PolicyRevision().AppendHex(b)
	b = append(b, `"}`...)
	s.writeJSON(r.Resp, fasthttp.StatusOK, b)
}

// admitBody is a decoded /v1/admit or /v1/check body, or the work a
// forwarded request's route costs (capture: reserve it, do not bill it).
type admitBody struct {
	work              []core.WorkItem
	perms             core.PermissionSet
	ttl               int64
	unknownPermission bool
	capture           bool
}

// decodeAdmit reads {"permission":"…","workload":[{"op":"…","count":N}],
// "ttl_ms":N} under the pinned snapshot. An operation name the snapshot does
// not price becomes an out-of-range index, so the engine refuses and counts
// it like any other unpriced operation. It returns a problem text for a body
// that is not well formed.
func (s *Shard) decodeAdmit(body []byte, snap *core.Snapshot) (admitBody, string) {
	var a admitBody
	v, err := s.parser.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return a, "body must be a JSON object"
	}
	if pv := v.Get("permission"); pv != nil {
		name, err := pv.StringBytes()
		if err != nil {
			return a, "permission must be a string"
		}
		var known bool
		a.perms, known = snap.Permission(name)
		a.unknownPermission = !known
	}
	if tv := v.Get("ttl_ms"); tv != nil {
		ms, err := tv.Int64()
		if err != nil || ms <= 0 || ms > core.MaxHoldTimeout/1e6 {
			return a, "ttl_ms must be a positive integer of milliseconds, at most 24 h"
		}
		a.ttl = ms * 1e6
	}
	lines, err := v.Get("workload").Array()
	if err != nil {
		return a, "workload must be an array"
	}
	if len(lines) > MaxWorkLines {
		return a, "workload has more than 64 lines"
	}
	a.work = s.work[:len(lines)]
	for i, line := range lines {
		if line.Type() != fastjson.TypeObject {
			return a, "workload lines must be objects"
		}
		name, err := line.Get("op").StringBytes()
		if err != nil {
			return a, "workload op must be a string"
		}
		n, err := line.Get("count").Uint64()
		if err != nil {
			return a, "workload count must be a non-negative integer"
		}
		op, ok := snap.OpIndexOf(name)
		if !ok {
			op = core.OpIndex(len(snap.Costs.Classes))
		}
		a.work[i] = core.WorkItem{Op: op, Count: n}
	}
	return a, ""
}

// serveReservation runs commit, finish or cancel on a reservation, here or,
// if another shard owns it, there: the request is parked and answered when
// the owner's reply comes back through the control plane.
func (s *Shard) serveReservation(r *Request, op Op) {
	owner, res, units, problem := s.decodeReservation(r.Req.Body(), op)
	if problem != "" {
		s.writeProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-body", problem)
		return
	}
	p, ok := s.authenticate(r.Req, r.Now)
	if !ok {
		s.engine.CountDenial(core.DenyUnknownPrincipal)
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyUnknownPrincipal})
		return
	}
	if owner == s.cfg.ID {
		if op == OpFinish && !s.claimAck(r) {
			s.engine.CountDenial(core.DenyAccountingBackpressure)
			s.writeDenial(r.Resp, core.Denial{Reason: core.DenyAccountingBackpressure})
			return
		}
		seq := s.usageSeq
		out := s.runOp(op, core.ReservationFromID(res), p, units, r.Now)
		s.answerOp(r.Resp, op, out)
		if op == OpFinish {
			s.respond(r, s.seqSince(seq))
		}
		return
	}
	if r.Defer == nil {
		s.writeProblem(r.Resp, fasthttp.StatusServiceUnavailable, "forwarding-unavailable", "This transport cannot forward to another shard")
		return
	}
	ticket := r.Defer()
	m := Outbound{Kind: OutForward, Op: op, From: s.cfg.ID, To: owner, Res: res, Units: units, Principal: p, Ticket: ticket}
	if !s.outbox.Push(m) {
		s.fail(ticket, core.DenyAccountingBackpressure)
	}
}
