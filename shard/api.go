package shard

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/tollgated/tollgated/control/message"
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
)

// Serve answers one data-plane request. It is never called from inside
// Poll: a completion Poll makes (a durable mark, funding news) must not
// ask for a new decision while the shard's waiters and acknowledgements
// are being walked (a gRPC call's next descriptor goes on after the pass).
func (s *Shard) Serve(r *Request) {
	if s.polling {
		panic("shard: BUG: Serve called from inside Poll")
	}
	path := r.Req.URI().Path()
	post := r.Req.Header.IsPost()
	s.lat.begin(r, path)
	switch {
	case isAuthzCall(r.Req.Header.RequestURI()):
		// Before the normalised path: Envoy's suffix is the client's path
		// as sent, and "/v1/authz/../../livez" must not reach /livez.
		s.serveAuthz(r)
	case bytes.Equal(path, pathCheck) && post:
		s.serveAdmit(r, true)
	case bytes.Equal(path, pathAdmit) && post:
		s.serveAdmit(r, false)
	case bytes.Equal(path, pathCommit) && post:
		s.serveReservation(r, message.OpCommit)
	case bytes.Equal(path, pathFinish) && post:
		s.serveReservation(r, message.OpFinish)
	case bytes.Equal(path, pathCancel) && post:
		s.serveReservation(r, message.OpCancel)
	case bytes.Equal(path, pathAdmission):
		s.serveAdmission(r)
	case bytes.Equal(path, pathUsage):
		s.servePostPaid(r)
	case isAuthzPath(path):
		s.serveAuthz(r)
	case bytes.Equal(path, pathLivez):
		s.writeJSON(r.Resp, fasthttp.StatusOK, append(s.out[:0], `{"status":"live"}`...))
	case bytes.Equal(path, pathReadyz):
		switch {
		case !s.ready:
			s.writeProblem(r.Resp, fasthttp.StatusServiceUnavailable, "not-ready", "Shard has not received its state yet")
		case s.storageUnready(r.Resp):
		default:
			s.writeJSON(r.Resp, fasthttp.StatusOK, append(s.out[:0], `{"status":"ready"}`...))
		}
	case isRoute(path):
		s.writeProblem(r.Resp, fasthttp.StatusMethodNotAllowed, "method-not-allowed", "Use POST")
	default:
		s.writeProblem(r.Resp, fasthttp.StatusNotFound, "not-found", "No such route")
	}
	s.lat.end(r)
}

func isRoute(p []byte) bool {
	return bytes.Equal(p, pathCheck) || bytes.Equal(p, pathAdmit) || bytes.Equal(p, pathCommit) ||
		bytes.Equal(p, pathFinish) || bytes.Equal(p, pathCancel)
}

// authenticate resolves the bearer key to a principal.
func (s *Shard) authenticate(req *fasthttp.Request, now int64) (core.Principal, bool) {
	key, ok := credential.BearerToken(req.Header.Peek(fasthttp.HeaderAuthorization))
	if !ok {
		return core.Principal{}, false
	}
	return s.keyPrincipal(key, now)
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
		s.writeDenial(r.Resp, s.beginDenial(p, reason))
		return
	}
	if s.refuseForStorage(r) {
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
		var problem fieldProblem
		if a, problem = s.decodeAdmit(r.Req.Body(), ctx.Snapshot()); problem.refused() {
			s.Release()
			s.writeFieldProblem(r.Resp, problem)
			return
		}
		if a.unknownPermission {
			s.Release()
			s.engine.CountDenial(core.DenyMissingPermission)
			s.writeDenial(r.Resp, core.Denial{Reason: core.DenyMissingPermission})
			return
		}
	} else {
		ctx.Rated() // its first attempt took its rate tokens
		var current bool
		if a, current = w.body(ctx.Snapshot()); !current {
			// The policy changed, or the key now acts for another
			// account: the body was resolved under another snapshot.
			// Answer the refusal it waited on (uncounted when it parked);
			// a retry is decoded afresh.
			s.Release()
			s.engine.CountDenial(w.reason)
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
	ctx.SetCapture(a.authz.capture)
	res, d := s.engine.Admit(&ctx, a.work, s, now)
	s.flushRefills(now)
	if d.Denied() {
		if !s.waitForFunding(r, p, &ctx, &a, mode, d, w) {
			if d.RetryAfter == 0 && d.ResetAt > now {
				// A later period's allowance funds the request.
				d.RetryAfter = d.ResetAt - now
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
		b = s.appendReservation(b, res)
		b = append(b, `","quote":`...)
		b = strconv.AppendUint(b, uint64(quote), 10)
		b = append(b, `,"expires_at":"`...)
		b = time.Unix(0, s.engine.Deadline(res)).UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, `"}`...)
		s.writeJSON(r.Resp, fasthttp.StatusOK, b)
		return
	}
	id := s.requestID(now)
	if a.capture && !s.reserveUsage() {
		// No room to journal the commit, as /v1/commit would: refuse
		// before the work may start.
		s.engine.Cancel(res, now)
		s.engine.CountDenial(core.DenyAccountingBackpressure)
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyAccountingBackpressure})
		return
	}
	if err := s.engine.AcquireCapacity(res); err != nil {
		s.releaseJournal(a.capture)
		s.writeDenial(r.Resp, core.Denial{Reason: core.ReasonOf(err)})
		return
	}
	if err := s.engine.Commit(res, id, now); err != nil {
		s.releaseJournal(a.capture)
		s.writeDenial(r.Resp, core.Denial{Reason: core.ReasonOf(err)})
		return
	}
	if a.capture {
		// Journaled like /v1/commit: if this node dies before the service
		// finishes, its restart bills the quote. The answer waits for it.
		ev, _ := s.engine.Committed(res, now)
		s.sendReserved(message.OutCommit, &ev)
	} else {
		quote = a.authz.units(quote, ctx.Snapshot()) // what it bills: the quote, but for an empty count
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

// releaseJournal returns the slot a capture reserved for its commit's
// journal entry when the commit does not happen.
func (s *Shard) releaseJournal(capture bool) {
	if capture {
		s.Release()
	}
}

// beginDenial is Begin's refusal as answered: a suspension or closure
// names the scope it came from (the account's own, or the ancestor's that
// stops every account below it).
func (s *Shard) beginDenial(p core.Principal, reason core.DenyReason) core.Denial {
	d := core.Denial{Reason: reason}
	if reason == core.DenyAccountSuspended || reason == core.DenyAccountClosed {
		if snap := s.engine.SnapshotOf(p); snap != nil {
			d.Scope = snap.StandingScope()
		}
	}
	return d
}

// admitBody is a decoded /v1/admit or /v1/check body, or the work a
// forwarded request's route costs (capture: reserve it, do not bill it).
type admitBody struct {
	work              []core.WorkItem
	perms             core.PermissionSet
	ttl               int64
	unknownPermission bool
	capture           bool
	authz             authzWork // a forward-auth route's capture and empty count
}

// Fields of an admit or check body, and of a workload line.
var (
	admitFields = [...]string{"permission", "workload", "ttl_ms"}
	lineFields  = [...]string{"op", "count"}
)

// decodeAdmit reads {"permission":"…","workload":[{"op":"…","count":N}],
// "ttl_ms":N} under the pinned snapshot (see decode.go for the rules every
// field follows). An operation name the snapshot does not price becomes an
// out-of-range index, so the engine refuses and counts it like any other
// unpriced operation; a permission it does not know is refused as not
// granted.
func (s *Shard) decodeAdmit(body []byte, snap *core.Snapshot) (a admitBody, p fieldProblem) {
	defer s.recoverDecode(&p)
	s.faultIn()
	o, p := s.object(body, maxAdmitBody)
	if p.refused() {
		return a, p
	}
	var f [len(admitFields)]*fastjson.Value
	if p = s.fields(o, admitFields[:], f[:]); p.refused() {
		return a, p
	}
	if f[0] != nil {
		name, p := s.str(f[0], "permission", maxNameLen, detailPermission)
		if p.refused() {
			return a, p
		}
		var known bool
		if a.perms, known = snap.Permission(name); !known {
			if p = s.plainName(name, "permission", detailPermission); p.refused() {
				return a, p
			}
			a.unknownPermission = true
		}
	}
	lines, p := s.array(f[1], "workload", 0, MaxWorkLines, detailWorkload)
	if p.refused() {
		return a, p
	}
	if f[2] != nil {
		ms, p := s.integer(f[2], "ttl_ms", 1, uint64(core.MaxHoldTimeout/1e6), detailTTL)
		if p.refused() {
			return a, p
		}
		a.ttl = int64(ms) * 1e6
	}
	a.work = s.work[:len(lines)]
	for i, line := range lines {
		if a.work[i], p = s.decodeLine(line, i, snap); p.refused() {
			return a, p
		}
	}
	return a, p
}

// decodeLine reads workload line i, {"op":"…","count":N}.
func (s *Shard) decodeLine(line *fastjson.Value, i int, snap *core.Snapshot) (core.WorkItem, fieldProblem) {
	s.atElement("workload", i)
	if line.Type() != fastjson.TypeObject {
		s.refuseField("")
		return core.WorkItem{}, invalid(detailLineObject)
	}
	o, _ := line.Object()
	var f [len(lineFields)]*fastjson.Value
	if p := s.fields(o, lineFields[:], f[:]); p.refused() {
		return core.WorkItem{}, p
	}
	name, p := s.str(f[0], "op", maxNameLen, detailOp)
	if p.refused() {
		return core.WorkItem{}, p
	}
	op, ok := snap.OpIndexOf(name)
	if !ok {
		if p = s.plainName(name, "op", detailOp); p.refused() {
			return core.WorkItem{}, p
		}
		op = core.OpIndex(len(snap.Costs.Classes))
	}
	n, p := s.integer(f[1], "count", 0, maxInt, detailCount)
	if p.refused() {
		return core.WorkItem{}, p
	}
	return core.WorkItem{Op: op, Count: n}, fieldProblem{}
}

// serveReservation runs commit, finish or cancel on a reservation, here or,
// if another shard owns it, there: the request is parked and answered when
// the owner's reply comes back through the control plane.
func (s *Shard) serveReservation(r *Request, op message.Op) {
	owner, res, units, problem := s.decodeReservation(r.Req.Body(), op)
	if problem.refused() {
		s.writeFieldProblem(r.Resp, problem)
		return
	}
	p, ok := s.reservationCaller(r.Req, r.Now)
	if !ok {
		s.engine.CountDenial(core.DenyUnknownPrincipal)
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyUnknownPrincipal})
		return
	}
	if owner == s.cfg.ID {
		// A finish bills and a commit is journaled (so that a node that
		// dies mid-work still bills it): either answer waits until that
		// record is durable.
		durable := op == message.OpFinish || op == message.OpCommit
		if durable && !s.claimAck(r) {
			s.engine.CountDenial(core.DenyAccountingBackpressure)
			s.writeDenial(r.Resp, core.Denial{Reason: core.DenyAccountingBackpressure})
			return
		}
		seq := s.usageSeq
		out := s.runOp(op, core.ReservationFromID(res), p, units, r.Now)
		s.answerOp(r.Resp, op, out)
		if durable {
			s.respond(r, s.seqSince(seq))
		}
		return
	}
	if r.Defer == nil {
		s.writeProblem(r.Resp, fasthttp.StatusServiceUnavailable, "forwarding-unavailable", "This transport cannot forward to another shard")
		return
	}
	ticket := r.Defer()
	m := message.Outbound{Kind: message.OutForward, Op: op, From: s.cfg.ID, To: owner, Res: res, Units: units, Principal: p, Ticket: ticket}
	if !s.trySend(m) {
		s.fail(ticket, core.DenyAccountingBackpressure)
		return
	}
	s.outbox.Notify() // a client is waiting
}
