package route

import (
	"errors"
	"testing"

	"github.com/tollgated/tollgated/core"
)

func mustPattern(t *testing.T, s string) Pattern {
	t.Helper()
	p, err := ParsePattern(s)
	if err != nil {
		t.Fatalf("ParsePattern(%q): %v", s, err)
	}
	return p
}

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pattern string
		yes, no []string
	}{
		{"/", []string{"/"}, []string{"/a", ""}},
		{"/v1/models", []string{"/v1/models"}, []string{"/v1/models/", "/v1/model", "/v1/models/x", "/V1/models", "/v1"}},
		// A trailing slash is ignored: normalised paths have none.
		{"/v1/models/", []string{"/v1/models"}, []string{"/v1/models/x", "/v1"}},
		{"/v1/*/chat", []string{"/v1/a/chat", "/v1/abc/chat"}, []string{"/v1//chat", "/v1/chat", "/v1/a/b/chat"}},
		{"/v1/files/**", []string{"/v1/files", "/v1/files/", "/v1/files/a", "/v1/files/a/b/c"}, []string{"/v1/filesx", "/v1", "/v2/files"}},
		{"/**", []string{"/", "/anything/at/all", ""}, nil},
		{"/*", []string{"/a"}, []string{"/", "/a/b"}},
		{"/a/*/**", []string{"/a/b", "/a/b/c/d"}, []string{"/a", "/a/"}},
	}
	for _, c := range cases {
		p := mustPattern(t, c.pattern)
		for _, path := range c.yes {
			if !p.Match([]byte(path)) {
				t.Errorf("%q does not match %q", c.pattern, path)
			}
		}
		for _, path := range c.no {
			if p.Match([]byte(path)) {
				t.Errorf("%q matches %q", c.pattern, path)
			}
		}
	}
}

func TestParsePatternRefusals(t *testing.T) {
	long := "/" + string(make([]byte, MaxPatternLen))
	deep := ""
	for range MaxSegments + 1 {
		deep += "/a"
	}
	for _, s := range []string{"", "v1/models", "/v1/mod*", "/**/x", "/v1/a b", "/v1?x=1", "/v1#f", "/caf\xc3\xa9", long, deep} {
		if _, err := ParsePattern(s); !errors.Is(err, ErrPattern) {
			t.Errorf("ParsePattern(%q) = %v, want ErrPattern", s, err)
		}
	}
	if p := mustPattern(t, "/v1/*/x/**"); p.String() != "/v1/*/x/**" {
		t.Errorf("String() = %q", p.String())
	}
}

func TestFirstMatchWinsThenDefault(t *testing.T) {
	table := &Table{Rules: []Rule{
		{Method: "POST", Pattern: mustPattern(t, "/v1/chat"), Op: 1, Count: 5},
		{Pattern: mustPattern(t, "/v1/chat"), Op: 2, Count: 1},
		{Pattern: mustPattern(t, "/admin/**"), Deny: true},
	}}
	if r := table.Match([]byte("POST"), []byte("/v1/chat")); r == nil || r.Op != 1 {
		t.Fatalf("POST /v1/chat matched %+v, want the first rule", r)
	}
	if r := table.Match([]byte("GET"), []byte("/v1/chat")); r == nil || r.Op != 2 {
		t.Fatalf("GET /v1/chat matched %+v, want the any-method rule", r)
	}
	if r := table.Match([]byte("GET"), []byte("/admin/users")); r == nil || !r.Deny {
		t.Fatalf("GET /admin/users matched %+v, want the deny rule", r)
	}
	if r := table.Match([]byte("GET"), []byte("/elsewhere")); r != nil {
		t.Fatalf("unmatched request got %+v without a default", r)
	}
	table.Default = &Rule{Op: 3, Count: 1}
	if r := table.Match([]byte("GET"), []byte("/elsewhere")); r != table.Default {
		t.Fatalf("unmatched request got %+v, want the default", r)
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	table := &Table{Rules: []Rule{
		{Method: "GET", Pattern: mustPattern(t, "/v1/models")},
		{Method: "POST", Pattern: mustPattern(t, "/v1/*/completions/**")},
	}}
	method, path := []byte("POST"), []byte("/v1/chat/completions/stream")
	if a := testing.AllocsPerRun(1000, func() {
		if table.Match(method, path) == nil {
			t.Fatal("no match")
		}
	}); a != 0 {
		t.Fatalf("Match allocates %v per call", a)
	}
}

func TestOfReadsTheSnapshot(t *testing.T) {
	if Of(&core.Snapshot{}) != nil {
		t.Fatal("a snapshot without routes has a table")
	}
	table := &Table{}
	if Of(&core.Snapshot{Routes: table}) != table {
		t.Fatal("Of does not return the attached table")
	}
}

func TestNamesAndMethods(t *testing.T) {
	for _, m := range []string{"GET", "POST", "PROPFIND"} {
		if !ValidMethod(m) {
			t.Errorf("ValidMethod(%q) = false", m)
		}
	}
	for _, m := range []string{"", "get", "GE T", "POST1", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"} {
		if ValidMethod(m) {
			t.Errorf("ValidMethod(%q) = true", m)
		}
	}
	for _, h := range []string{"X-Api-Key", "x-token-count", "Authorization"} {
		if !ValidHeaderName(h) {
			t.Errorf("ValidHeaderName(%q) = false", h)
		}
	}
	for _, h := range []string{"", "X Api", "X:Api", "Ü", string(make([]byte, MaxHeaderNameLen+1))} {
		if ValidHeaderName(h) {
			t.Errorf("ValidHeaderName(%q) = true", h)
		}
	}
}
