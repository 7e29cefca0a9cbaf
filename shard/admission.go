package shard

import (
	"bytes"
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

// Seed-000 deny reasons.
const (
	reasonCostLimit       = "cost_limit_exceeded"
	reasonSuspended       = "account_suspended"
	reasonClosed          = "account_closed"
	reasonTenancyMismatch = "tenancy_mismatch"
	windowNone            = "none" // a scope with no budget period
)

func (s *Shard) serveAdmission(r *Request) {
	if !s.platformCall(r, r.Req.Header.IsGet(), "Use GET") {
		return
	}
	agent := r.Req.URI().QueryArgs().Peek("agent_id")
	if len(agent) == 0 {
		s.writeProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-query", "agent_id is required")
		return
	}
	snap, cell, ok := s.engine.Standing(agent)
	if !ok {
		s.writeProblem(r.Resp, fasthttp.StatusNotFound, "unknown-agent", "No such agent")
		return
	}
	switch snap.Status {
	case core.StatusSuspended:
		s.writeAdmissionDeny(r.Resp, reasonSuspended, snap.StandingScope(), windowNone, 0)
		return
	case core.StatusClosed:
		s.writeAdmissionDeny(r.Resp, reasonClosed, snap.StandingScope(), windowNone, 0)
		return
	}
	if scope, ok := tenancyMismatch(snap, r.Req); ok {
		s.writeAdmissionDeny(r.Resp, reasonTenancyMismatch, scope, windowNone, 0)
		return
	}
	if cell != nil && cell.Present() {
		if ev, ok := cell.Load(); ok && (ev.PeriodEnd == 0 || r.Now < ev.PeriodEnd) &&
			(ev.Remaining == 0 || ev.Remaining < snap.DenyThreshold) {
			window := ev.Period.Window()
			if window == "" {
				window = windowNone
			}
			s.writeAdmissionDeny(r.Resp, reasonCostLimit, ev.Scope, window, ev.PeriodEnd)
			return
		}
	}
	s.writeJSON(r.Resp, fasthttp.StatusOK, append(s.out[:0], admitAnswer...))
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

func (s *Shard) writeAdmissionDeny(resp *fasthttp.Response, reason string, scope core.Scope, window string, resetAt int64) {
	b := append(s.out[:0], `{"decision":"deny","reason":"`...)
	b = append(b, reason...)
	b = append(b, `","scope":"`...)
	b = append(b, scope.String()...)
	b = append(b, `","window":"`...)
	b = append(b, window...)
	b = append(b, `","reset_at":`...)
	if resetAt == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = time.Unix(0, resetAt).UTC().AppendFormat(b, time.RFC3339)
		b = append(b, '"')
	}
	b = append(b, '}')
	s.writeJSON(resp, fasthttp.StatusOK, b)
}

// platformCall admits a call to a platform route: the right method (else
// 405, with hint) and a platform token (else 401). It answers the refusals
// itself and reports whether the route may go on.
func (s *Shard) platformCall(r *Request, methodOK bool, hint string) bool {
	if !methodOK {
		s.writeProblem(r.Resp, fasthttp.StatusMethodNotAllowed, "method-not-allowed", hint)
		return false
	}
	if !s.authenticatePlatform(r.Req, r.Now) {
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyUnknownPrincipal})
		return false
	}
	return true
}

// authenticatePlatform checks the bearer token against the platform
// tokens: a customer key, even a valid one, is not a platform token.
func (s *Shard) authenticatePlatform(req *fasthttp.Request, now int64) bool {
	h := req.Header.Peek(fasthttp.HeaderAuthorization)
	if !bytes.HasPrefix(h, bearer) {
		return false
	}
	key := h[len(bearer):]
	if p, ok := s.cache.Lookup(key, now); ok {
		_, known := s.platform[p]
		return known
	}
	d, err := s.hasher.Digest(key)
	if err != nil {
		return false
	}
	p := d.Principal()
	stored, ok := s.platform[p]
	if !ok || !credential.Equal(&stored, &d) {
		return false
	}
	s.cache.Store(key, p, now+s.cfg.CredentialTTL)
	return true
}
