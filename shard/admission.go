package shard

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

// Seed 000: GET /v1/admission?agent_id=… answers an agent runtime's "may
// this agent start new work?" from the shard's memory alone — the agent's
// installed snapshot and the funding evidence the control plane publishes —
// so it costs no allocation and no round trip.
//
// The answer is always exactly five fields. An admit carries nulls; a deny
// names its reason, the scope that caused it, that scope's budget window
// and when it resets (RFC 3339, or null — never "", which agents read as a
// malformed answer and fail open on).

var (
	pathAdmission  = []byte("/v1/admission")
	hdrOrgID       = []byte("Org-Id")
	hdrWorkspaceID = []byte("Workspace-Id")
	admitAnswer    = []byte(`{"decision":"admit","reason":null,"scope":null,"window":null,"reset_at":null}`)
)

// AdmissionReason is what a 200 answer of GET /v1/admission decided: an
// admit, or a deny's reason. Each is counted (PlatformStats.Decisions).
type AdmissionReason uint8

const (
	AdmissionAdmit AdmissionReason = iota
	AdmissionCostLimit
	AdmissionSuspended
	AdmissionClosed
	AdmissionTenancyMismatch
	AdmissionUnknownAgent
	NumAdmissionReasons
)

// admissionReasons are the seed-000 reason strings; an admit has none.
var admissionReasons = [NumAdmissionReasons]string{
	AdmissionAdmit:           "",
	AdmissionCostLimit:       "cost_limit_exceeded",
	AdmissionSuspended:       "account_suspended",
	AdmissionClosed:          "account_closed",
	AdmissionTenancyMismatch: "tenancy_mismatch",
	AdmissionUnknownAgent:    "unknown_agent",
}

// String is the reason as the answer spells it ("" for an admit).
func (r AdmissionReason) String() string { return admissionReasons[r] }

const windowNone = "none" // a scope with no budget period

const detailAgentID = "agent_id must be given once: 1 to 64 bytes of UTF-8 without control characters"

// serveAdmission answers whether an agent may start new work. Any
// provisioned account is an agent_id: a deployment of one level (an org
// only, like the quickstart's) asks about its org. The answer walks the
// account's chain: its own standing, then its ancestors' (nearest first),
// then the tenancy headers, then the funding evidence of its chain; a deny
// names the scope that caused it and when rollovers alone let the agent
// start again (null when none will). An id that names no
// provisioned account is denied (unknown_agent): an error status would
// make the agent fail open, run unbounded and report usage nobody bills.
func (s *Shard) serveAdmission(r *Request) {
	if !s.platformCall(r, routeAdmission, r.Req.Header.IsGet(), "Use GET") {
		return
	}
	agent, p := s.decodeAdmissionQuery(r.Req)
	if p.refused() {
		s.platformStats.BadRequests[routeAdmission]++
		s.writeFieldProblem(r.Resp, p)
		return
	}
	snap, cell, ok := s.engine.Standing(agent)
	if !ok {
		s.writeAdmissionDeny(r.Resp, AdmissionUnknownAgent, core.ScopeAgent, windowNone, 0)
		return
	}
	if reason, scope, ok := s.standingDeny(snap); ok {
		s.writeAdmissionDeny(r.Resp, reason, scope, windowNone, 0)
		return
	}
	if scope, ok := tenancyMismatch(snap, r.Req); ok {
		s.writeAdmissionDeny(r.Resp, AdmissionTenancyMismatch, scope, windowNone, 0)
		return
	}
	if cell != nil && cell.Present() {
		// The evidence says what the chain can spend across period
		// boundaries (the rollover rule): a chain whose debt outlasts the
		// boundary stays denied through it, before the ledger's rollover
		// is republished.
		need := max(snap.DenyThreshold, 1)
		if ev, ok := cell.Load(); ok {
			if left, ok := ev.At(r.Now); ok && left < need {
				window := ev.Period.Window()
				if window == "" {
					window = windowNone
				}
				s.writeAdmissionDeny(r.Resp, AdmissionCostLimit, ev.Scope, window, ev.ResetFor(need, r.Now))
				return
			}
		}
	}
	s.platformStats.Decisions[AdmissionAdmit]++
	s.writeJSON(r.Resp, fasthttp.StatusOK, append(s.out[:0], admitAnswer...))
}

// decodeAdmissionQuery returns the agent_id the query names exactly once.
// Other parameters are ignored: a cache or proxy in front may add its own.
func (s *Shard) decodeAdmissionQuery(req *fasthttp.Request) (agent []byte, p fieldProblem) {
	defer s.recoverDecode(&p)
	s.faultIn()
	s.atTop()
	n := 0
	req.URI().QueryArgs().VisitAll(func(k, v []byte) {
		if string(k) == "agent_id" {
			if n == 0 {
				agent = v
			}
			n++
		}
	})
	switch {
	case n > 1:
		s.refuseField("agent_id")
		return nil, fieldProblem{problemDuplicateField, detailAgentID}
	case !plainText(agent, core.MaxAccountIDLen):
		s.refuseField("agent_id")
		return nil, fieldProblem{problemInvalidQuery, detailAgentID}
	}
	return agent, p
}

// standingDeny denies an agent whose standing is not active. The snapshot
// carries its chain's standing (the provisioner folds every ancestor's
// status in, naming the scope it comes from), so a suspended workspace or
// org denies every agent below it without a lookup here.
func (s *Shard) standingDeny(snap *core.Snapshot) (AdmissionReason, core.Scope, bool) {
	if reason, ok := statusDeny(snap.Status); ok {
		return reason, snap.StandingScope(), true
	}
	return 0, 0, false
}

func statusDeny(st core.Status) (AdmissionReason, bool) {
	switch st {
	case core.StatusSuspended:
		return AdmissionSuspended, true
	case core.StatusClosed:
		return AdmissionClosed, true
	}
	return 0, false
}

// tenancyMismatch checks the caller's Org-Id and Workspace-Id, when sent,
// against the agent's recorded ancestors. Ancestor i sits at scope
// snap.Scope+1+i: the root of every hierarchy is an org.
func tenancyMismatch(snap *core.Snapshot, req *fasthttp.Request) (core.Scope, bool) {
	for _, h := range [...]struct {
		name  []byte
		scope core.Scope
	}{{hdrWorkspaceID, core.ScopeWorkspace}, {hdrOrgID, core.ScopeOrg}} {
		v := req.Header.PeekBytes(h.name)
		if len(v) == 0 {
			continue
		}
		if !hasAncestor(snap, h.scope, v) {
			return h.scope, true
		}
	}
	return 0, false
}

func hasAncestor(snap *core.Snapshot, scope core.Scope, id []byte) bool {
	if snap.Scope == scope {
		return string(snap.Account) == string(id)
	}
	i := int(scope) - int(snap.Scope) - 1
	return i >= 0 && i < len(snap.Ancestors) && string(snap.Ancestors[i]) == string(id)
}

func (s *Shard) writeAdmissionDeny(resp *fasthttp.Response, reason AdmissionReason, scope core.Scope, window string, resetAt int64) {
	s.platformStats.Decisions[reason]++
	b := append(s.out[:0], `{"decision":"deny","reason":"`...)
	b = append(b, reason.String()...)
	b = append(b, `","scope":"`...)
	b = append(b, scope.String()...)
	b = append(b, `","window":"`...)
	b = append(b, window...)
	b = append(b, `","reset_at":`...)
	b = appendResetAt(b, resetAt)
	b = append(b, '}')
	s.writeJSON(resp, fasthttp.StatusOK, b)
}

// platformCall admits a call to a platform route: the right method (else
// 405, with hint) and a platform token (else 401). It answers and counts
// the refusals itself and reports whether the route may go on.
func (s *Shard) platformCall(r *Request, route platformRoute, methodOK bool, hint string) bool {
	if !methodOK {
		s.platformStats.BadRequests[route]++
		s.writeProblem(r.Resp, fasthttp.StatusMethodNotAllowed, "method-not-allowed", hint)
		return false
	}
	if !s.authenticatePlatform(r.Req, r.Now) {
		s.platformStats.Unauthorized[route]++
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyUnknownPrincipal})
		return false
	}
	return true
}

// authenticatePlatform checks the bearer token against the platform
// tokens: a customer key, even a valid one, is not a platform token.
func (s *Shard) authenticatePlatform(req *fasthttp.Request, now int64) bool {
	key, ok := credential.BearerToken(req.Header.Peek(fasthttp.HeaderAuthorization))
	if !ok {
		return false
	}
	_, ok = s.platformPrincipal(key, now)
	return ok
}

// platformPrincipal resolves a platform token to its principal.
func (s *Shard) platformPrincipal(key []byte, now int64) (core.Principal, bool) {
	if p, ok := s.cache.Lookup(key, now); ok {
		_, known := s.platform[p]
		return p, known
	}
	d, err := s.hasher.Digest(key)
	if err != nil {
		return core.Principal{}, false
	}
	p := d.Principal()
	stored, ok := s.platform[p]
	if !ok || !credential.Equal(&stored, &d) {
		return core.Principal{}, false
	}
	s.cache.Store(key, p, now+s.cfg.CredentialTTL)
	return p, true
}

// appendResetAt appends a reset time as seed 000 spells it: RFC 3339 in
// UTC, or null for none (0) — never "", which agents read as malformed.
func appendResetAt(b []byte, resetAt int64) []byte {
	if resetAt == 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = time.Unix(0, resetAt).UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"')
}
