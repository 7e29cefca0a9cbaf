package policy

import (
	"slices"
	"strconv"
	"strings"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/route"
)

// Routes prices the requests a gateway asks about on the forward-auth route
// (/v1/authz): the first rule whose method and path match the original
// request decides its work; Default prices the rest, and without one they
// are refused (403 route-not-allowed).
type Routes struct {
	Rules   []RouteRule `json:"rules"`
	Default *RouteWork  `json:"default"`
	// URI says how the service behind the gateway reads the forms of
	// request-target that services read differently; omitted (and
	// stored so) when it refuses them all and matches case-sensitively.
	URI *RouteURI `json:"uri,omitempty"`
}

// RouteURI is route.URIRules as written: each field names how the service
// reads one ambiguous form, "refuse" (the default) refusing it.
type RouteURI struct {
	// PathParams: a ';' in a path segment. "strip": the service drops
	// it and the rest of the segment (Tomcat, Jetty, Spring); "keep": it
	// is an ordinary character (Go, nginx, Node).
	PathParams string `json:"path_params"`
	// Backslash: a '\' in the path. "slash": the service reads it as '/'.
	Backslash string `json:"backslash"`
	// EncodedSeparators: %2F, %5C, %2E, %3B, %3F, %23, %25 in the path.
	// "decode": the service decodes them once before it routes.
	EncodedSeparators string `json:"encoded_separators"`
	// TrailingDot: a segment ending in '.' or ' '. "strip": the service
	// drops them (IIS, Windows).
	TrailingDot string `json:"trailing_dot"`
	// MethodOverride: X-HTTP-Method-Override, X-HTTP-Method,
	// X-Method-Override, or a _method query parameter. "ignore": the
	// service does not honour them (or the gateway removes them).
	MethodOverride string `json:"method_override"`
	// CaseInsensitive: the service ignores the case of paths (IIS):
	// paths and patterns are matched folded, and a method with a
	// lower-case letter is upper-cased instead of refused.
	CaseInsensitive bool `json:"case_insensitive"`
}

// RouteRule is one rule: a method ("*" for any) and a path pattern (see
// route.ParsePattern), then either Deny or the work a match costs (as in
// RouteWork; the fields are spelled out rather than embedded so that
// decoding errors name them as they are written).
type RouteRule struct {
	Method      string `json:"method"`
	Path        string `json:"path"`
	Deny        bool   `json:"deny"`
	Op          string `json:"op"`
	Count       uint64 `json:"count"`
	CountHeader string `json:"count_header"`
	Capture     bool   `json:"capture"`
	TTLMS       int64  `json:"ttl_ms"`
	AtDeadline  string `json:"at_deadline,omitempty"`
}

func (r *RouteRule) work() RouteWork {
	return RouteWork{Op: r.Op, Count: r.Count, CountHeader: r.CountHeader, Capture: r.Capture, TTLMS: r.TTLMS,
		AtDeadline: r.AtDeadline}
}

// RouteWork is what a matched request costs: Count items of operation class
// Op, or the count in request header CountHeader when the gateway sets one.
// Capture admits and commits a reservation for the quote instead of billing
// it; the service behind the gateway finishes it (POST /v1/finish, with a
// platform token) with the units it used, within TTLMS (default: the
// policy's hold timeout). Unfinished by then, it bills what AtDeadline
// says: its quote ("bill", the default, stored omitted) or nothing
// ("release").
type RouteWork struct {
	Op          string `json:"op"`
	Count       uint64 `json:"count"`
	CountHeader string `json:"count_header"`
	Capture     bool   `json:"capture"`
	TTLMS       int64  `json:"ttl_ms"`
	AtDeadline  string `json:"at_deadline,omitempty"`
}

// What an unfinished capture bills at its deadline (RouteWork.AtDeadline).
const (
	AtDeadlineBill    = "bill"
	AtDeadlineRelease = "release"
)

// Treatments of an ambiguous form (RouteURI).
const (
	URIRefuse = "refuse"
	URIStrip  = "strip"
	URIKeep   = "keep"
	URISlash  = "slash"
	URIDecode = "decode"
	URIIgnore = "ignore"
)

// MethodAny is how a rule for every method is written (and stored).
const MethodAny = "*"

func (r *Routes) normalise() {
	if r.Rules == nil {
		r.Rules = []RouteRule{}
	}
	for i := range r.Rules {
		if r.Rules[i].Method == "" {
			r.Rules[i].Method = MethodAny
		}
		if r.Rules[i].AtDeadline == AtDeadlineBill {
			r.Rules[i].AtDeadline = ""
		}
	}
	if r.Default != nil && r.Default.AtDeadline == AtDeadlineBill {
		d := *r.Default
		d.AtDeadline = ""
		r.Default = &d
	}
	if r.URI != nil {
		u := *r.URI
		for _, f := range []*string{&u.PathParams, &u.Backslash, &u.EncodedSeparators, &u.TrailingDot, &u.MethodOverride} {
			if *f == "" {
				*f = URIRefuse
			}
		}
		r.URI = &u
		if u == (RouteURI{URIRefuse, URIRefuse, URIRefuse, URIRefuse, URIRefuse, false}) {
			r.URI = nil
		}
	}
}

// uriRules compiles r.URI; errors are *FieldError.
func (r *Routes) uriRules() (route.URIRules, error) {
	var u route.URIRules
	if r.URI == nil {
		return u, nil
	}
	fields := []struct {
		name, value string
		out         *route.Treatment
		allowed     map[string]route.Treatment
	}{
		{"path_params", r.URI.PathParams, &u.PathParams, map[string]route.Treatment{URIStrip: route.Strip, URIKeep: route.Keep}},
		{"backslash", r.URI.Backslash, &u.Backslash, map[string]route.Treatment{URISlash: route.AsSlash}},
		{"encoded_separators", r.URI.EncodedSeparators, &u.EncodedSeparators, map[string]route.Treatment{URIDecode: route.Decode}},
		{"trailing_dot", r.URI.TrailingDot, &u.TrailingDot, map[string]route.Treatment{URIStrip: route.Strip}},
		{"method_override", r.URI.MethodOverride, &u.MethodOverride, map[string]route.Treatment{URIIgnore: route.Ignore}},
	}
	for _, f := range fields {
		if f.value == URIRefuse || f.value == "" {
			continue
		}
		t, ok := f.allowed[f.value]
		if !ok {
			names := []string{strconv.Quote(URIRefuse)}
			for name := range f.allowed {
				names = append(names, strconv.Quote(name))
			}
			slices.Sort(names[1:])
			return u, fieldErr("routes.uri."+f.name, "must be %s", strings.Join(names, " or "))
		}
		*f.out = t
	}
	u.CaseInsensitive = r.URI.CaseInsensitive
	return u, nil
}

// reservedCountHeaders are headers a count_header must not name: the
// forward-auth exchange's own (the original request, the credential, the
// call's framing) and the ones tollgated answers with. A count is read
// from a header only the gateway sets.
var reservedCountHeaders = []string{
	"Authorization", "Content-Length", "Transfer-Encoding", "Host", "Connection", "Te", "Trailer", "Upgrade",
	"X-Original-Method", "X-Original-URI", "X-Forwarded-Method", "X-Forwarded-Uri", "X-Forwarded-For",
	"X-Forwarded-Host", "X-Forwarded-Proto", "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override",
}

func reservedCountHeader(h string) bool {
	if len(h) >= len("X-Tollgate-") && strings.EqualFold(h[:len("X-Tollgate-")], "X-Tollgate-") {
		return true
	}
	for _, r := range reservedCountHeaders {
		if strings.EqualFold(h, r) {
			return true
		}
	}
	return false
}

// table compiles and checks d's routes against its operation classes; it
// returns nil for a document without routes. Errors are *FieldError.
func (d *Document) table() (*route.Table, error) {
	r := d.Routes
	if r == nil {
		return nil, nil
	}
	if len(r.Rules) > route.MaxRules {
		return nil, fieldErr("routes.rules", "at most %d rules, not %d", route.MaxRules, len(r.Rules))
	}
	ops := d.opNames()
	uri, err := r.uriRules()
	if err != nil {
		return nil, err
	}
	t := &route.Table{Rules: make([]route.Rule, len(r.Rules)), URI: uri}
	for i := range r.Rules {
		rule := &r.Rules[i]
		field := "routes.rules[" + strconv.Itoa(i) + "]"
		out := &t.Rules[i]
		switch {
		case rule.Method == MethodAny:
		case route.ValidMethod(rule.Method):
			out.Method = rule.Method
		default:
			return nil, fieldErr(field+".method", "must be %q or an uppercase method name like GET", MethodAny)
		}
		p, err := route.ParsePattern(rule.Path)
		if err != nil {
			return nil, fieldErr(field+".path", "%v", err)
		}
		if uri.CaseInsensitive {
			p.FoldCase()
		}
		out.Pattern = p
		work := rule.work()
		if rule.Deny {
			if work != (RouteWork{}) {
				return nil, fieldErr(field+".deny", "a rule that denies names no work (op, count, count_header, capture, ttl_ms, at_deadline)")
			}
			out.Deny = true
			continue
		}
		if err := d.compileWork(&work, ops, field, out); err != nil {
			return nil, err
		}
	}
	if r.Default != nil {
		t.Default = &route.Rule{}
		if err := d.compileWork(r.Default, ops, "routes.default", t.Default); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (d *Document) compileWork(w *RouteWork, ops []string, field string, out *route.Rule) error {
	op, ok := slices.BinarySearch(ops, w.Op)
	if !ok {
		return fieldErr(field+".op", "%q is not one of operations", w.Op)
	}
	switch {
	case w.Count == 0:
		return fieldErr(field+".count", "must be at least 1 (it is also the count when count_header is absent)")
	case w.Count > d.Limits.MaxItems:
		return fieldErr(field+".count", "must not exceed limits.max_items (%d)", d.Limits.MaxItems)
	case w.CountHeader != "" && !route.ValidHeaderName(w.CountHeader):
		return fieldErr(field+".count_header", "must be a header name (an HTTP token of at most %d bytes)", route.MaxHeaderNameLen)
	case w.CountHeader != "" && reservedCountHeader(w.CountHeader):
		return fieldErr(field+".count_header", "must be a header only the gateway sets, not %s (the forward-auth exchange's own)", w.CountHeader)
	case w.TTLMS != 0 && !w.Capture:
		return fieldErr(field+".ttl_ms", "applies to captured reservations only (set capture)")
	case w.TTLMS < 0 || w.TTLMS > MaxHoldTimeoutMS:
		return fieldErr(field+".ttl_ms", "must be in [1, %d] (0 means limits.hold_timeout_ms)", MaxHoldTimeoutMS)
	case w.AtDeadline != "" && w.AtDeadline != AtDeadlineBill && w.AtDeadline != AtDeadlineRelease:
		return fieldErr(field+".at_deadline", "must be %q or %q", AtDeadlineBill, AtDeadlineRelease)
	case w.AtDeadline != "" && !w.Capture:
		return fieldErr(field+".at_deadline", "applies to captured reservations only (set capture)")
	}
	*out = route.Rule{Method: out.Method, Pattern: out.Pattern, Op: core.OpIndex(op), Count: w.Count,
		CountHeader: w.CountHeader, Capture: w.Capture, TTL: w.TTLMS * 1e6, Release: w.AtDeadline == AtDeadlineRelease}
	return nil
}
