package policy

import (
	"slices"
	"strconv"

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
}

func (r *RouteRule) work() RouteWork {
	return RouteWork{Op: r.Op, Count: r.Count, CountHeader: r.CountHeader, Capture: r.Capture, TTLMS: r.TTLMS}
}

// RouteWork is what a matched request costs: Count items of operation class
// Op, or the count in request header CountHeader when the gateway sets one.
// Capture admits and commits a reservation for the quote instead of billing
// it; the service behind the gateway finishes it (POST /v1/finish) with the
// units it used, within TTLMS (default: the policy's hold timeout), or is
// billed the quote.
type RouteWork struct {
	Op          string `json:"op"`
	Count       uint64 `json:"count"`
	CountHeader string `json:"count_header"`
	Capture     bool   `json:"capture"`
	TTLMS       int64  `json:"ttl_ms"`
}

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
	}
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
	t := &route.Table{Rules: make([]route.Rule, len(r.Rules))}
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
		out.Pattern = p
		work := rule.work()
		if rule.Deny {
			if work != (RouteWork{}) {
				return nil, fieldErr(field+".deny", "a rule that denies names no work (op, count, count_header, capture, ttl_ms)")
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
	case w.TTLMS != 0 && !w.Capture:
		return fieldErr(field+".ttl_ms", "applies to captured reservations only (set capture)")
	case w.TTLMS < 0 || w.TTLMS > MaxHoldTimeoutMS:
		return fieldErr(field+".ttl_ms", "must be in [1, %d] (0 means limits.hold_timeout_ms)", MaxHoldTimeoutMS)
	}
	*out = route.Rule{Method: out.Method, Pattern: out.Pattern, Op: core.OpIndex(op), Count: w.Count,
		CountHeader: w.CountHeader, Capture: w.Capture, TTL: w.TTLMS * 1e6}
	return nil
}
