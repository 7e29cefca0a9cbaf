package policy

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/route"
)

// routed is a policy with a route table: chat is priced per request,
// embeddings by a count the gateway sets, completions are captured, admin
// paths are denied, and everything else costs one request.
const routed = `{"permissions":["api"],
	"operations":{"requests":{"weight":10},"tokens":{"weight":1}},
	"limits":{"max_items":100000},
	"routes":{"rules":[
		{"method":"POST","path":"/v1/chat","op":"requests","count":1},
		{"path":"/v1/embeddings","op":"tokens","count":100,"count_header":"X-Token-Count"},
		{"method":"POST","path":"/v1/completions/**","op":"tokens","count":4000,"capture":true,"ttl_ms":60000},
		{"method":"*","path":"/admin/**","deny":true}],
	 "default":{"op":"requests","count":1}}}`

func TestRoutesCompileToATable(t *testing.T) {
	c, err := Compile(account(routed, 3))
	if err != nil {
		t.Fatal(err)
	}
	table := route.Of(c.Snapshot)
	if table == nil || len(table.Rules) != 4 || table.Default == nil {
		t.Fatalf("table = %+v", table)
	}
	requests, _ := c.Snapshot.OpIndexOf([]byte("requests"))
	tokens, _ := c.Snapshot.OpIndexOf([]byte("tokens"))
	cases := []struct {
		method, path string
		op           int
		count        uint64
		header       string
		capture      bool
		deny         bool
	}{
		{"POST", "/v1/chat", int(requests), 1, "", false, false},
		{"GET", "/v1/chat", int(requests), 1, "", false, false}, // the default
		{"PUT", "/v1/embeddings", int(tokens), 100, "X-Token-Count", false, false},
		{"POST", "/v1/completions/abc", int(tokens), 4000, "", true, false},
		{"DELETE", "/admin/users/1", 0, 0, "", false, true},
	}
	for _, cs := range cases {
		r := table.Match([]byte(cs.method), []byte(cs.path))
		if r == nil || int(r.Op) != cs.op || r.Count != cs.count || r.CountHeader != cs.header ||
			r.Capture != cs.capture || r.Deny != cs.deny {
			t.Errorf("%s %s matched %+v", cs.method, cs.path, r)
		}
	}
	if r := table.Match([]byte("POST"), []byte("/v1/completions")); r.TTL != 60e9 {
		t.Errorf("capture ttl %d ns", r.TTL)
	}
	if r := table.Match([]byte("POST"), []byte("/v1/chat")); r.Method != "POST" {
		t.Errorf("method %q", r.Method)
	}
	if r := table.Match([]byte("GET"), []byte("/admin")); r.Method != "" {
		t.Errorf(`"*" compiled to method %q, want "" (any)`, r.Method)
	}
}

func TestRoutesWithoutDefaultRefuseTheRest(t *testing.T) {
	doc := strings.Replace(routed, `,
	 "default":{"op":"requests","count":1}`, ``, 1)
	c, err := Compile(account(doc, 1))
	if err != nil {
		t.Fatal(err)
	}
	if r := route.Of(c.Snapshot).Match([]byte("GET"), []byte("/elsewhere")); r != nil {
		t.Fatalf("an unmatched request matched %+v", r)
	}
}

func TestDocumentsWithoutRoutesKeepTheirBytes(t *testing.T) {
	d, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(Canonical(d), []byte("routes")) {
		t.Fatalf("canonical form of a document without routes names them: %s", Canonical(d))
	}
	c, err := Compile(account(example, 1))
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshot.Routes != nil || route.Of(c.Snapshot) != nil {
		t.Fatal("a policy without routes compiled a table")
	}
}

func TestRoutesCanonicalIsStable(t *testing.T) {
	d, err := Parse([]byte(routed))
	if err != nil {
		t.Fatal(err)
	}
	c1 := Canonical(d)
	if !bytes.Contains(c1, []byte(`{"method":"*","path":"/v1/embeddings","deny":false,"op":"tokens","count":100,"count_header":"X-Token-Count","capture":false,"ttl_ms":0}`)) {
		t.Fatalf("canonical rule not explicit: %s", c1)
	}
	d2, err := Parse(c1)
	if err != nil {
		t.Fatal(err)
	}
	if c2 := Canonical(d2); !bytes.Equal(c1, c2) {
		t.Fatalf("canonical form changed on a round trip:\n%s\n%s", c1, c2)
	}
	// Canonical leaves a hand-built document's rules as they were.
	h := &Document{Operations: map[string]Operation{"r": {Weight: 1}}, Limits: Limits{MaxItems: 1},
		Routes: &Routes{Rules: []RouteRule{{Path: "/", Op: "r", Count: 1}}}}
	Canonical(h)
	if h.Routes.Rules[0].Method != "" {
		t.Fatal("Canonical changed the caller's document")
	}
}

func TestRouteErrorsNameTheField(t *testing.T) {
	rule := func(r string) string {
		return `{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"rules":[` + r + `]}}`
	}
	cases := []struct{ doc, field string }{
		{rule(`{"method":"get","path":"/","op":"requests","count":1}`), "routes.rules[0].method"},
		{rule(`{"path":"v1","op":"requests","count":1}`), "routes.rules[0].path"},
		{rule(`{"path":"/a*","op":"requests","count":1}`), "routes.rules[0].path"},
		{rule(`{"path":"/","op":"video","count":1}`), "routes.rules[0].op"},
		{rule(`{"path":"/","op":"requests","count":0}`), "routes.rules[0].count"},
		{rule(`{"path":"/","op":"requests","count":11}`), "routes.rules[0].count"},
		{rule(`{"path":"/","op":"requests","count":1,"count_header":"X Count"}`), "routes.rules[0].count_header"},
		{rule(`{"path":"/","op":"requests","count":1,"ttl_ms":5}`), "routes.rules[0].ttl_ms"},
		{rule(`{"path":"/","op":"requests","count":1,"capture":true,"ttl_ms":-1}`), "routes.rules[0].ttl_ms"},
		{rule(`{"path":"/","op":"requests","count":1,"capture":true,"ttl_ms":86400001}`), "routes.rules[0].ttl_ms"},
		{rule(`{"path":"/","deny":true,"op":"requests"}`), "routes.rules[0].deny"},
		{rule(`{"path":"/","op":"requests","count":1,"price":3}`), "routes.rules[0].price"},
		{rule(`{"path":"/","op":"requests","count":1,"capture":"yes"}`), "routes.rules.capture"},
		{rule(`{"path":"/","path":"/x","op":"requests","count":1}`), "routes.rules[0].path"},
		{`{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"default":{"op":"requests"}}}`, "routes.default.count"},
		{`{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"rules":[],"default":{"op":"nope","count":1}}}`, "routes.default.op"},
		{`{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":[]}`, "routes"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: error %v, want a field error for %s", c.doc, err, c.field)
		}
	}
	many := make([]string, route.MaxRules+1)
	for i := range many {
		many[i] = `{"path":"/","op":"requests","count":1}`
	}
	_, err := Parse([]byte(rule(strings.Join(many, ","))))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "routes.rules" {
		t.Errorf("%d rules: %v", len(many), err)
	}
}

// TestRouteURIRulesCompile: routes.uri names how the service reads each
// ambiguous form; omitted, or stated as all "refuse", it refuses them all
// and is left out of the stored form (so documents that never named it
// keep their bytes and revision).
func TestRouteURIRulesCompile(t *testing.T) {
	withURI := func(uri string) string {
		return strings.Replace(routed, `"default":{"op":"requests","count":1}`, `"default":{"op":"requests","count":1},"uri":`+uri, 1)
	}
	all := withURI(`{"path_params":"strip","backslash":"slash","encoded_separators":"decode","trailing_dot":"strip","method_override":"ignore","case_insensitive":true}`)
	c, err := Compile(account(all, 1))
	if err != nil {
		t.Fatal(err)
	}
	table := route.Of(c.Snapshot)
	want := route.URIRules{PathParams: route.Strip, Backslash: route.AsSlash, EncodedSeparators: route.Decode,
		TrailingDot: route.Strip, MethodOverride: route.Ignore, CaseInsensitive: true}
	if table.URI != want {
		t.Fatalf("compiled %+v, want %+v", table.URI, want)
	}
	// Case-insensitive: patterns are folded, so a folded path matches.
	if r := table.Match([]byte("POST"), []byte("/v1/completions/x")); r == nil || !r.Capture {
		t.Fatalf("folded match: %+v", r)
	}
	keep, err := Compile(account(withURI(`{"path_params":"keep"}`), 1))
	if err != nil || route.Of(keep.Snapshot).URI != (route.URIRules{PathParams: route.Keep}) {
		t.Fatalf("keep: %v %+v", err, route.Of(keep.Snapshot).URI)
	}
	plain, _ := Parse([]byte(routed))
	for _, doc := range []string{withURI(`{}`), withURI(`{"path_params":"refuse","backslash":"refuse","encoded_separators":"refuse","trailing_dot":"refuse","method_override":"refuse","case_insensitive":false}`)} {
		d, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(Canonical(d), Canonical(plain)) {
			t.Fatalf("default uri rules stored as %s", Canonical(d))
		}
	}
	d, _ := Parse([]byte(all))
	c1 := Canonical(d)
	if !bytes.Contains(c1, []byte(`"uri":{"path_params":"strip","backslash":"slash","encoded_separators":"decode","trailing_dot":"strip","method_override":"ignore","case_insensitive":true}`)) {
		t.Fatalf("canonical uri rules: %s", c1)
	}
	if d2, err := Parse(c1); err != nil || !bytes.Equal(Canonical(d2), c1) {
		t.Fatalf("round trip: %v", err)
	}
	for field, value := range map[string]string{"path_params": "slash", "backslash": "strip", "encoded_separators": "keep",
		"trailing_dot": "decode", "method_override": "strip"} {
		_, err := Parse([]byte(withURI(`{"` + field + `":"` + value + `"}`)))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "routes.uri."+field {
			t.Errorf("%s %q: %v", field, value, err)
		}
	}
}

// TestCaptureAtDeadline: a capture route says what it bills unfinished;
// "bill" is the default and is stored omitted, so existing documents keep
// their bytes.
func TestCaptureAtDeadline(t *testing.T) {
	release := strings.Replace(routed, `"capture":true,"ttl_ms":60000}`, `"capture":true,"ttl_ms":60000,"at_deadline":"release"}`, 1)
	c, err := Compile(account(release, 1))
	if err != nil {
		t.Fatal(err)
	}
	if r := route.Of(c.Snapshot).Match([]byte("POST"), []byte("/v1/completions")); r == nil || !r.Capture || !r.Release {
		t.Fatalf("release route compiled to %+v", r)
	}
	bill := strings.Replace(routed, `"capture":true,"ttl_ms":60000}`, `"capture":true,"ttl_ms":60000,"at_deadline":"bill"}`, 1)
	b, _ := Parse([]byte(bill))
	plain, _ := Parse([]byte(routed))
	if !bytes.Equal(Canonical(b), Canonical(plain)) {
		t.Fatalf("at_deadline bill stored as %s", Canonical(b))
	}
	if r, _ := Compile(account(bill, 1)); route.Of(r.Snapshot).Match([]byte("POST"), []byte("/v1/completions")).Release {
		t.Fatal("a bill route releases")
	}
	d, _ := Parse([]byte(release))
	if c1 := Canonical(d); !bytes.Contains(c1, []byte(`"ttl_ms":60000,"at_deadline":"release"}`)) {
		t.Fatalf("canonical: %s", c1)
	}
}

func TestRouteErrorsNameTheNewFields(t *testing.T) {
	rule := func(r string) string {
		return `{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"rules":[` + r + `]}}`
	}
	cases := []struct{ doc, field string }{
		{rule(`{"path":"/","op":"requests","count":1,"at_deadline":"release"}`), "routes.rules[0].at_deadline"},
		{rule(`{"path":"/","op":"requests","count":1,"capture":true,"at_deadline":"never"}`), "routes.rules[0].at_deadline"},
		{rule(`{"path":"/","op":"requests","count":1,"count_header":"Content-Length"}`), "routes.rules[0].count_header"},
		{rule(`{"path":"/","op":"requests","count":1,"count_header":"authorization"}`), "routes.rules[0].count_header"},
		{rule(`{"path":"/","op":"requests","count":1,"count_header":"X-Original-URI"}`), "routes.rules[0].count_header"},
		{rule(`{"path":"/","op":"requests","count":1,"count_header":"x-tollgate-units"}`), "routes.rules[0].count_header"},
		{`{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"rules":[],"uri":{"case_insensitive":"yes"}}}`, "routes.uri.case_insensitive"},
		{`{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"rules":[],"uri":{"nope":1}}}`, "routes.uri.nope"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: error %v, want a field error for %s", c.doc, err, c.field)
		}
	}
}
