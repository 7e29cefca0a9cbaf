package shard

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/decimal"
	"github.com/tollgated/tollgated/route"
)

// The forward-auth route.
//
// A gateway in front of a service (nginx auth_request, Caddy forward_auth,
// Traefik ForwardAuth, Envoy ext_authz in HTTP mode) asks /v1/authz whether
// each request may pass, and forwards it only on a 2xx. The question carries
// the original request in one of two shapes, chosen on the call's URI as
// sent:
//
//   - /v1/authz exactly (or with a query), with the original method and
//     URI in headers: X-Original-Method / X-Original-URI (as nginx
//     configurations set them) or X-Forwarded-Method / X-Forwarded-Uri
//     (Caddy, Traefik);
//   - /v1/authz/<original path and query>, with the original method as the
//     call's own (Envoy's path_prefix appends the original path).
//
// Every source present must agree: Caddy and Traefik pass the client's own
// headers on to the auth server, so a client could otherwise name a cheaper
// route in the header the gateway does not set.
//
// tollgated reads only what the gateway sets or passes on unchanged, and
// nothing a client may choose: the original request, the key (from the
// header the daemon is configured with, --authz-key-header, Authorization:
// Bearer by default) and a route's count header (named by the policy). The
// original URI must be an origin-form request-target, and a form that the
// service may read differently from tollgated (route/uri.go) is refused
// unless the account's policy says how the service reads it; the
// normalised path is what the account's route table matches. The request
// then takes the same staged path as /v1/check (runAdmit), durable
// acknowledgement included, and is answered 200 with headers the gateway
// forwards upstream, or with the same refusals as /v1/check. A route marked
// capture is admitted and committed but not billed: the service finishes
// the reservation named in X-Tollgate-Reservation with the units it used,
// using a platform token (authz_capture.go), never the customer's key.

var (
	pathAuthz    = []byte("/v1/authz")
	pathAuthzDir = []byte("/v1/authz/")
)

// Headers of the forward-auth exchange.
const (
	hdrOriginalMethod  = "X-Original-Method"
	hdrOriginalURI     = "X-Original-URI"
	hdrForwardedMethod = "X-Forwarded-Method"
	hdrForwardedURI    = "X-Forwarded-Uri"

	hdrAccount         = "X-Tollgate-Account"
	hdrRequestID       = "X-Tollgate-Request-Id"
	hdrUnits           = "X-Tollgate-Units"
	hdrReservation     = "X-Tollgate-Reservation"
	hdrRateLimitPolicy = "RateLimit-Policy"
	hdrRateLimit       = "RateLimit"
)

// MaxOriginalURI bounds the original request's URI, in bytes.
const MaxOriginalURI = 4096

// authzRequest is the original request of the forward-auth call being
// served, kept in the shard between reading it and matching its route.
type authzRequest struct {
	method      []byte // into the request being served
	path, query []byte // the original request-target's, as sent (into the request)
	// methodField and uriField name where the method and URI were read,
	// for a problem's field.
	methodField, uriField string
	folded                []byte // the method upper-cased (case-insensitive tables)
	dec                   []byte // scratch: the path decoded
	norm                  []byte // the normalised path: what routes match
}

func isAuthzPath(p []byte) bool {
	return bytes.Equal(p, pathAuthz) || bytes.HasPrefix(p, pathAuthzDir)
}

// isAuthzCall reports whether a request's URI, as sent, is a forward-auth
// call: /v1/authz, with a query, or with a suffix. The route is chosen on
// these raw bytes, not on the normalised path, because an Envoy suffix may
// hold dot segments and escaped slashes that resolve to another route.
func isAuthzCall(uri []byte) bool {
	if !bytes.HasPrefix(uri, pathAuthz) {
		return false
	}
	return len(uri) == len(pathAuthz) || uri[len(pathAuthz)] == '/' || uri[len(pathAuthz)] == '?'
}

// serveAuthz answers one forward-auth call.
func (s *Shard) serveAuthz(r *Request) {
	if code, field := s.readOriginal(r.Req); code != "" {
		detail := ""
		if code == "invalid-original-uri" {
			detail = route.FaultSyntax.Detail()
		}
		s.writeAuthzProblem(r.Resp, fasthttp.StatusBadRequest, code, field, detail)
		return
	}
	key := s.authzKey(r.Req)
	p, ok := core.Principal{}, false
	if key != nil {
		p, ok = s.keyPrincipal(key, r.Now)
	}
	if !ok {
		s.engine.CountDenial(core.DenyUnknownPrincipal)
		s.writeDenial(r.Resp, core.Denial{Reason: core.DenyUnknownPrincipal})
		return
	}
	s.runAdmit(r, p, modeAuthz, nil)
}

// readOriginal reads the original method and URI into s.authz and checks
// what does not depend on the account's policy (the method is a token, the
// URI an origin-form request-target), or returns the problem code and the
// field (header) at fault.
func (s *Shard) readOriginal(req *fasthttp.Request) (code, field string) {
	om, fm := req.Header.Peek(hdrOriginalMethod), req.Header.Peek(hdrForwardedMethod)
	ou, fu := req.Header.Peek(hdrOriginalURI), req.Header.Peek(hdrForwardedURI)
	var method, uri []byte
	methodField, uriField := hdrOriginalMethod, hdrOriginalURI
	// The shape is chosen on the URI as sent: fasthttp's parsed path is
	// normalised, and "/v1/authz/x/../" must not read the headers.
	if raw := req.Header.RequestURI(); len(raw) > len(pathAuthz) && raw[len(pathAuthz)] == '/' {
		// Envoy: /v1/authz + the original path, under the original method.
		method, uri, methodField, uriField = req.Header.Method(), raw[len(pathAuthz):], "method", "path"
		switch {
		case len(om) > 0 && !bytes.Equal(om, method):
			return "conflicting-original-request", hdrOriginalMethod
		case len(fm) > 0 && !bytes.Equal(fm, method):
			return "conflicting-original-request", hdrForwardedMethod
		case len(ou) > 0 && !bytes.Equal(ou, uri):
			return "conflicting-original-request", hdrOriginalURI
		case len(fu) > 0 && !bytes.Equal(fu, uri):
			return "conflicting-original-request", hdrForwardedURI
		}
	} else {
		var ok bool
		if method, ok = agree(om, fm); !ok {
			return "conflicting-original-request", hdrForwardedMethod
		}
		if uri, ok = agree(ou, fu); !ok {
			return "conflicting-original-request", hdrForwardedURI
		}
		if len(method) == 0 {
			return "missing-original-method", hdrOriginalMethod
		}
		if len(uri) == 0 {
			return "missing-original-uri", hdrOriginalURI
		}
		if len(om) == 0 {
			methodField = hdrForwardedMethod
		}
		if len(ou) == 0 {
			uriField = hdrForwardedURI
		}
	}
	if len(method) > route.MaxMethodLen || !isToken(method) {
		return "invalid-original-method", methodField
	}
	if len(uri) > MaxOriginalURI {
		return "original-uri-too-long", uriField
	}
	path, query, fault := route.CheckTarget(uri)
	if fault != route.FaultNone {
		return "invalid-original-uri", uriField
	}
	a := &s.authz
	a.method, a.path, a.query, a.methodField, a.uriField = method, path, query, methodField, uriField
	return "", ""
}

// agree returns the value of whichever of two headers is present, and
// false when both are and they differ.
func agree(a, b []byte) ([]byte, bool) {
	switch {
	case len(a) == 0:
		return b, true
	case len(b) == 0 || bytes.Equal(a, b):
		return a, true
	}
	return nil, false
}

func isToken(b []byte) bool {
	for _, c := range b {
		if !route.IsTokenChar(c) {
			return false
		}
	}
	return len(b) > 0
}

// authzKey returns the customer's key from the original request: the
// Bearer credential of Authorization, or with --authz-key-header the whole
// value of the header it names (never one a request names). A missing or
// malformed key is nil: the caller answers 401.
func (s *Shard) authzKey(req *fasthttp.Request) []byte {
	name := s.cfg.AuthzKeyHeader
	if name == "" || strings.EqualFold(name, fasthttp.HeaderAuthorization) {
		key, _ := credential.BearerToken(req.Header.Peek(fasthttp.HeaderAuthorization))
		return key
	}
	key := bytes.TrimRight(req.Header.Peek(name), " \t")
	for _, c := range key {
		if c < 0x21 || c > 0x7e {
			return nil
		}
	}
	if len(key) == 0 {
		return nil
	}
	return key
}

// authzWork is what a forward-auth route adds to the work it prices: how
// its reservation is captured (core.CaptureNone when it is billed at
// once), and whether its count was zero (an empty upload: admitted as one
// item, billed as none).
type authzWork struct {
	capture core.Capture
	empty   bool
}

// units is what an admitted request of quote q is billed at once: q, or
// for an empty count the policy's price of no items (its fixed or minimum
// cost, at most q).
func (w authzWork) units(q core.CostUnits, snap *core.Snapshot) core.CostUnits {
	if !w.empty {
		return q
	}
	return min(q, max(snap.Costs.Fixed, snap.Costs.Minimum))
}

// routeWork matches the original request read by serveAuthz against the
// pinned snapshot's route table and returns its work, or answers the
// request itself (403 when no rule admits the route, 400 for a form the
// table refuses or a count header that is not a count) and returns false.
func (s *Shard) routeWork(r *Request, snap *core.Snapshot) (admitBody, bool) {
	t := route.Of(snap)
	if t == nil {
		s.writeAuthzProblem(r.Resp, fasthttp.StatusForbidden, "route-not-allowed", "", "")
		return admitBody{}, false
	}
	rule, ok := s.matchRoute(r, t)
	if !ok {
		return admitBody{}, false
	}
	if rule == nil || rule.Deny {
		s.writeAuthzProblem(r.Resp, fasthttp.StatusForbidden, "route-not-allowed", "", "")
		return admitBody{}, false
	}
	count := rule.Count
	if rule.CountHeader != "" {
		if v := r.Req.Header.Peek(rule.CountHeader); len(v) > 0 {
			n, ok := parseCount(v)
			if !ok {
				s.writeAuthzProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-count-header", rule.CountHeader, "")
				return admitBody{}, false
			}
			count = n
		}
	}
	var w authzWork
	switch {
	case rule.Capture && rule.Release:
		w.capture = core.CaptureRelease
	case rule.Capture:
		w.capture = core.CaptureBill
	}
	if count == 0 {
		// The engine prices at least one item, and the request still
		// passes every gate (rate, concurrency, funding for that item);
		// billed at once, it costs no item. A capture holds the item and
		// is billed what the service reports.
		count, w.empty = 1, !rule.Capture
	}
	s.work[0] = core.WorkItem{Op: rule.Op, Count: count}
	return admitBody{work: s.work[:1], ttl: rule.TTL, capture: rule.Capture, authz: w}, true
}

// matchRoute reads the original request under t's URI rules and returns
// the rule it matches (nil: none), or answers 400 for a form t refuses and
// returns false.
func (s *Shard) matchRoute(r *Request, t *route.Table) (*route.Rule, bool) {
	a := &s.authz
	if a.folded == nil {
		a.folded = make([]byte, 0, route.MaxMethodLen) // once: a method is never longer
	}
	method, fault := t.URI.Method(a.folded, a.method)
	if fault != route.FaultNone {
		s.writeAuthzProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-original-method", a.methodField, fault.Detail())
		return nil, false
	}
	if t.URI.MethodOverride != route.Ignore {
		for _, h := range route.MethodOverrideHeaders {
			if len(r.Req.Header.Peek(h)) > 0 {
				s.writeAuthzProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-original-method", h,
					route.FaultMethodOverride.Detail())
				return nil, false
			}
		}
		if route.QueryOverridesMethod(a.query) {
			s.writeAuthzProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-original-uri", a.uriField,
				route.FaultMethodOverride.Detail())
			return nil, false
		}
	}
	a.norm, a.dec, fault = t.URI.Normalise(a.norm[:0], a.dec, a.path)
	if fault != route.FaultNone {
		s.writeAuthzProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-original-uri", a.uriField, fault.Detail())
		return nil, false
	}
	return t.Match(method, a.norm), true
}

// parseCount reads a count header: decimal digits, at most 2^63-1.
func parseCount(v []byte) (uint64, bool) {
	n, ok := decimal.Uint(v)
	return n, ok && n <= 1<<63-1
}

// writeAuthzAllowed answers an admitted forward-auth call: 200, no body, and
// headers for the gateway to forward upstream — the account, the request
// id, the units billed (or held, when captured), the reservation to finish
// when captured, and the account's rate-limit policy.
func (s *Shard) writeAuthzAllowed(resp *fasthttp.Response, ctx *core.RequestContext, res core.Reservation,
	id core.RequestID, units core.CostUnits, capture bool) {
	resp.SetStatusCode(fasthttp.StatusOK)
	s.answerHeaders = true // respond keeps them if the answer is parked
	resp.Header.Set(hdrAccount, string(ctx.Account()))
	resp.Header.SetBytesV(hdrRequestID, id.AppendHex(s.hdr[:0]))
	resp.Header.SetBytesV(hdrUnits, strconv.AppendUint(s.hdr[:0], uint64(units), 10))
	if capture {
		resp.Header.SetBytesV(hdrReservation, s.appendReservation(s.hdr[:0], res))
	}
	if b := appendRateLimitPolicy(s.hdr[:0], ctx.Limits()); len(b) > 0 {
		resp.Header.SetBytesV(hdrRateLimitPolicy, b)
		s.hdr = b[:0]
	}
	if left, full, ok := ctx.RequestsLeft(); ok {
		b := appendRequestsLeft(s.hdr[:0], left, full)
		resp.Header.SetBytesV(hdrRateLimit, b)
		s.hdr = b[:0]
	}
	resp.SetBody(nil)
}

// appendRequestsLeft is the RateLimit field of the request rate: what this
// shard's share has left, and the whole seconds until it is full again
// (the draft's t, the quota's reset). It is the shard's share, not the
// node's: exact for a client whose connection stays on one shard.
func appendRequestsLeft(b []byte, left uint32, full int64) []byte {
	b = append(b, policyRequests+";r="...)
	b = strconv.AppendUint(b, uint64(left), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, (full+999_999_999)/1e9, 10)
}

// The quota policies advertised in RateLimit-Policy (the IETF draft's
// syntax, draft-ietf-httpapi-ratelimit-headers): the request rate, with its
// burst as a vendor parameter, and the in-flight ceiling. A cost-unit rate
// is not advertised: the draft's quota units registry has no unit for it.
const (
	policyRequests    = `"requests"`
	policyConcurrency = `"concurrency"`
)

func appendRateLimitPolicy(b []byte, l *core.Limits) []byte {
	if l.RequestRate > 0 {
		b = append(b, policyRequests+";q="...)
		b = strconv.AppendUint(b, uint64(l.RequestRate), 10)
		b = append(b, ";w=1;tollgated-burst="...)
		b = strconv.AppendUint(b, uint64(l.RequestBurst), 10)
	}
	if l.MaxConcurrent > 0 {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, policyConcurrency+";q="...)
		b = strconv.AppendUint(b, uint64(l.MaxConcurrent), 10)
		b = append(b, `;qu="concurrent-requests"`...)
	}
	return b
}

// writeRateLimit adds the RateLimit fields to a forward-auth refusal by a
// rate or concurrency limit: the policy, and the refused one's available
// quota (none) and, for the request rate, the seconds until the shard's
// share is full again, as on an allowed answer (Retry-After says when the
// next request may pass).
func (s *Shard) writeRateLimit(resp *fasthttp.Response, ctx *core.RequestContext, d core.Denial) {
	if d.Reason != core.DenyRequestRateLimited && d.Reason != core.DenyConcurrencyLimited {
		return
	}
	b := appendRateLimitPolicy(s.hdr[:0], ctx.Limits())
	resp.Header.SetBytesV(hdrRateLimitPolicy, b)
	if d.Reason == core.DenyRequestRateLimited {
		left, full, ok := ctx.RequestsLeft()
		if !ok { // refused before the stage ran: the next token's time
			left, full = 0, d.RetryAfter
		}
		b = appendRequestsLeft(b[:0], left, full)
	} else {
		b = append(b[:0], policyConcurrency+";r=0"...)
	}
	resp.Header.SetBytesV(hdrRateLimit, b)
	s.hdr = b[:0]
}

// authzTitles are the titles of the forward-auth route's own problems.
var authzTitles = map[string]string{
	"missing-original-method":      "The original request's method is missing",
	"invalid-original-method":      "The original request's method is not a method, or may be read as another",
	"missing-original-uri":         "The original request's URI is missing",
	"invalid-original-uri":         "The original request's URI is not an origin-form URI, or may be read as another",
	"original-uri-too-long":        "The original request's URI is longer than 4096 bytes",
	"conflicting-original-request": "Two sources of the original request disagree",
	"invalid-count-header":         "The count header is not a non-negative integer",
	"route-not-allowed":            "No route of the account's policy admits this request",
}

// writeAuthzProblem answers a forward-auth call that cannot be priced: a
// malformed or ambiguous description of the original request (400) or a
// route the account's policy does not admit (403). field names the header
// at fault; detail (JSON-safe), when set, says which rule refused it.
func (s *Shard) writeAuthzProblem(resp *fasthttp.Response, status int, code, field, detail string) {
	b := s.out[:0]
	b = append(b, `{"type":"about:blank","title":"`...)
	b = append(b, authzTitles[code]...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"code":"`...)
	b = append(b, code...)
	b = append(b, `","retry":"never"`...)
	if field != "" {
		b = append(b, `,"field":"`...)
		b = append(b, field...)
		b = append(b, '"')
	}
	if detail != "" {
		b = append(b, `,"detail":"`...)
		b = append(b, detail...)
		b = append(b, '"')
	}
	b = append(b, '}')
	s.out = b
	resp.SetStatusCode(status)
	resp.Header.SetContentTypeBytes(problemJSON)
	resp.SetBody(b)
}
