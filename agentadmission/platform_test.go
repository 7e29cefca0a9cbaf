package agentadmission

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseAnswer(t *testing.T) {
	reset := time.Date(2026, 6, 28, 14, 0, 0, 0, time.UTC)
	good := []struct {
		name string
		body string
		want Decision
	}{
		{"admit alone", `{"decision":"admit"}`, Decision{}},
		{"admit full", admitJSON, Decision{}},
		{"deny", denyJSON, Decision{Denied: true, Reason: "cost_limit_exceeded", Scope: "workspace", Window: "daily", ResetAt: reset}},
		{"deny null reset", `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":null}`,
			Decision{Denied: true, Reason: "r", Scope: "org", Window: "w"}},
		{"deny fractional reset", `{"decision":"deny","reason":"r","scope":"agent","window":"w","reset_at":"2026-06-28T14:00:00.5Z"}`,
			Decision{Denied: true, Reason: "r", Scope: "agent", Window: "w", ResetAt: reset.Add(500 * time.Millisecond)}},
		{"unknown fields ignored", `{"decision":"admit","extra":[1,2]}`, Decision{}},
		// tollgated's answer for an agent it does not know: a deny, so an
		// unprovisioned agent stops instead of failing open.
		{"unknown agent", `{"decision":"deny","reason":"unknown_agent","scope":"agent","window":"none","reset_at":null}`,
			Decision{Denied: true, Reason: "unknown_agent", Scope: "agent", Window: "none"}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			d, err := parseAnswer([]byte(tc.body))
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if !d.ResetAt.Equal(tc.want.ResetAt) {
				t.Fatalf("reset_at = %v, want %v", d.ResetAt, tc.want.ResetAt)
			}
			d.ResetAt, tc.want.ResetAt = time.Time{}, time.Time{}
			if d != tc.want {
				t.Fatalf("decision = %+v, want %+v", d, tc.want)
			}
		})
	}

	bad := []struct{ name, body string }{
		{"empty body", ``},
		{"not JSON", `<html>oops</html>`},
		{"truncated", `{"decision":"deny","reason":`},
		{"trailing garbage", `{"decision":"admit"} x`},
		{"JSON null", `null`},
		{"array", `[]`},
		{"string", `"admit"`},
		{"missing decision", `{"reason":"r"}`},
		{"null decision", `{"decision":null}`},
		{"decision not a string", `{"decision":1}`},
		{"upper-case decision", `{"decision":"ADMIT"}`},
		{"unknown decision", `{"decision":"maybe"}`},
		{"key in other case", `{"Decision":"admit"}`},
		{"deny without reason", `{"decision":"deny","scope":"org","window":"w","reset_at":null}`},
		{"deny without scope", `{"decision":"deny","reason":"r","window":"w","reset_at":null}`},
		{"deny without window", `{"decision":"deny","reason":"r","scope":"org","reset_at":null}`},
		{"deny without reset_at", `{"decision":"deny","reason":"r","scope":"org","window":"w"}`},
		{"deny with unknown scope", `{"decision":"deny","reason":"r","scope":"team","window":"w","reset_at":null}`},
		{"reason not a string", `{"decision":"admit","reason":7}`},
		{"empty reset_at", `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":""}`},
		{"empty reset_at on admit", `{"decision":"admit","reset_at":""}`},
		{"malformed reset_at", `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":"tomorrow"}`},
		{"reset_at without zone", `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":"2026-06-28T14:00:00"}`},
		{"reset_at as number", `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":1782655200}`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := parseAnswer([]byte(tc.body)); err == nil {
				t.Fatalf("accepted %s as %+v", tc.body, d)
			}
		})
	}
}

func TestRequestShape(t *testing.T) {
	for _, tc := range []struct {
		name       string
		org, ws    string
		wantOrg    []string
		wantWS     []string
		platformAt string // suffix added to the platform URL
	}{
		{"no tenancy", "", "", nil, nil, ""},
		{"org only", "org-7", "", []string{"org-7"}, nil, "/"},
		{"both", "org-7", "ws-3", []string{"org-7"}, []string{"ws-3"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan *http.Request, 1)
			p := platform(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Clone(r.Context())
				answer(200, admitJSON)(w, r)
			}))
			c := New(Config{URL: p.URL + tc.platformAt, Token: "s3cret", OrgID: tc.org, WorkspaceID: tc.ws})
			const agent = "team a/b&c=ü"
			if _, err := c.ask(t.Context(), agent); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.Method != http.MethodGet || r.URL.Path != "/v1/admission" {
				t.Fatalf("request %s %s", r.Method, r.URL.Path)
			}
			if q := r.URL.Query(); len(q) != 1 || q.Get("agent_id") != agent {
				t.Fatalf("query %q does not carry agent_id %q alone", r.URL.RawQuery, agent)
			}
			if a := r.Header.Get("Authorization"); a != "Bearer s3cret" {
				t.Fatalf("Authorization = %q", a)
			}
			// Values, not Get: an empty header present would read as "".
			if v := r.Header.Values("Org-Id"); !slices.Equal(v, tc.wantOrg) {
				t.Fatalf("Org-Id = %q, want %q", v, tc.wantOrg)
			}
			if v := r.Header.Values("Workspace-Id"); !slices.Equal(v, tc.wantWS) {
				t.Fatalf("Workspace-Id = %q, want %q", v, tc.wantWS)
			}
		})
	}
}

func TestOversizedAnswerFails(t *testing.T) {
	p := platform(t, answer(200, `{"decision":"admit","pad":"`+strings.Repeat("x", maxAnswer)+`"}`))
	c := New(Config{URL: p.URL, Token: "t"})
	if _, err := c.ask(t.Context(), "a"); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Fatalf("err = %v, want a size error", err)
	}
}

func TestEmptyAgentMakesNoCall(t *testing.T) {
	r := newRig(t, "http://127.0.0.1:1")
	if _, err := r.c.ask(t.Context(), ""); err != errNoAgent {
		t.Fatalf("err = %v", err)
	}
	if n := r.calls.n.Load(); n != 0 {
		t.Fatalf("%d calls for an empty agent id", n)
	}
}
