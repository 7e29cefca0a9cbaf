package route

import (
	"strings"
	"testing"
)

// TestCheckTargetRefusesWhatIsNotOriginForm: a raw '#', space, control or
// non-ASCII byte, a character RFC 3986 keeps out of paths, or a broken
// escape is refused whatever the policy; the path and query are split at
// the first '?'.
func TestCheckTargetRefusesWhatIsNotOriginForm(t *testing.T) {
	for _, bad := range []string{
		"", "x", "http://evil/v1/chat", "*", "/x#/../admin/secret", "/v1/chat#", "/v1/chat?a=1#frag",
		"/v1/ch at", "/v1/chat\x00", "/v1/\x7fchat", "/v1/caf\xc3\xa9", "/v1/\"x\"", "/v1/<x>", "/v1/[x]",
		"/v1/x^y", "/v1/x`y", "/v1/{x}", "/v1/x|y", "/v1/%zz", "/v1/%4", "/v1/%", "/v1?q=%g0", "/v1?q=a b",
		"/v1?q=\x01", "/v1?q=\xff",
	} {
		if _, _, f := CheckTarget([]byte(bad)); f != FaultSyntax {
			t.Errorf("CheckTarget(%q) = %v, want FaultSyntax", bad, f)
		}
	}
	for target, want := range map[string][2]string{
		"/v1/chat":                  {"/v1/chat", ""},
		"/v1/chat?stream=1&a=?/b":   {"/v1/chat", "stream=1&a=?/b"},
		"/a;b/c\\d/%2F:@!$&'()*+,=": {"/a;b/c\\d/%2F:@!$&'()*+,=", ""},
		"/?":                        {"/", ""},
		"/x?ids[]=1&f={a}|`^\\":     {"/x", "ids[]=1&f={a}|`^\\"},
	} {
		p, q, f := CheckTarget([]byte(target))
		if f != FaultNone || string(p) != want[0] || string(q) != want[1] {
			t.Errorf("CheckTarget(%q) = %q, %q, %v", target, p, q, f)
		}
	}
}

// TestNormaliseRefusesAmbiguousFormsByDefault: under the zero URIRules
// every form some service reads differently is refused with its fault.
func TestNormaliseRefusesAmbiguousFormsByDefault(t *testing.T) {
	var u URIRules
	for path, want := range map[string]Fault{
		"/v1/completions;x=1":     FaultParams,
		"/x/..;/admin/secret":     FaultParams,
		"/v1/chat;jsessionid=abc": FaultParams,
		"/admin\\secret":          FaultBackslash,
		"/v1/%5cadmin":            FaultEncoded, // an escaped backslash is an escaped separator
		"/v1/a%2fb":               FaultEncoded,
		"/v1/a%2Fb":               FaultEncoded,
		"/v1/%2e%2e/admin":        FaultEncoded,
		"/v1/%252e%252e/admin":    FaultEncoded,
		"/v1/x%3bjsessionid":      FaultEncoded,
		"/v1/x%3Fy":               FaultEncoded,
		"/v1/x%23y":               FaultEncoded,
		"/v1/completions.":        FaultTrailingDot,
		"/admin./secret":          FaultTrailingDot,
		"/v1/completions%20":      FaultTrailingDot,
		"/v1/...":                 FaultTrailingDot,
		"/v1/%00x":                FaultSyntax,
		"/v1/%ff%fe":              FaultSyntax,
		"/v1/%c0%ae%c0%ae":        FaultSyntax, // overlong '.', not UTF-8
	} {
		if _, _, f := u.Normalise(nil, nil, []byte(path)); f != want {
			t.Errorf("Normalise(%q) = %v, want %v", path, f, want)
		}
	}
}

// TestNormalisedForm: what every allowed form normalises to, under the
// default rules and each treatment.
func TestNormalisedForm(t *testing.T) {
	cases := []struct {
		rules URIRules
		in    map[string]string
	}{
		{URIRules{}, map[string]string{
			"/": "/", "//": "/", "/a": "/a", "/a/": "/a", "/a//b": "/a/b", "/a/./b": "/a/b", "/a/b/..": "/a",
			"/a/b/../c": "/a/c", "/../../etc": "/etc", "/..": "/", "/a/.": "/a", "/a/b/": "/a/b",
			"/a/..b": "/a/..b", "/v1/ch%61t": "/v1/chat", "/v1/caf%C3%A9": "/v1/caf\u00e9", "/V1/Chat": "/V1/Chat",
			"/a.b/c": "/a.b/c",
		}},
		{URIRules{PathParams: Strip}, map[string]string{
			"/v1/completions;x=1": "/v1/completions", "/x/..;/admin/secret": "/admin/secret",
			"/a;b/c;d": "/a/c", "/;x/a": "/a",
		}},
		{URIRules{PathParams: Keep}, map[string]string{
			"/v1/completions;x=1": "/v1/completions;x=1", "/x/..;/admin": "/x/..;/admin",
		}},
		{URIRules{Backslash: AsSlash}, map[string]string{
			"/admin\\secret": "/admin/secret", "/x\\..\\admin": "/admin",
		}},
		{URIRules{EncodedSeparators: Decode}, map[string]string{
			"/v1/a%2fb": "/v1/a/b", "/x/%2e%2e/admin": "/admin", "/v1/%252e": "/v1/%2e",
		}},
		{URIRules{EncodedSeparators: Decode, Backslash: AsSlash}, map[string]string{
			"/x%5c..%5cadmin": "/admin",
		}},
		{URIRules{TrailingDot: Strip}, map[string]string{
			"/v1/completions.": "/v1/completions", "/admin./secret": "/admin/secret", "/a/b. . ": "/a/b",
			"/a/b/.. ": "/a", "/a/...": "/a",
		}},
		{URIRules{CaseInsensitive: true}, map[string]string{
			"/V1/Chat": "/v1/chat", "/ADMIN/%C3%89": "/admin/\u00c9",
		}},
	}
	for _, c := range cases {
		for in, want := range c.in {
			got, _, f := c.rules.Normalise(nil, nil, []byte(in))
			if f != FaultNone || string(got) != want {
				t.Errorf("%+v: Normalise(%q) = %q, %v; want %q", c.rules, in, got, f, want)
			}
		}
	}
}

// TestNormaliseAppendsToOut: the normalised form is appended after what
// out holds, and a refusal leaves out as it was.
func TestNormaliseAppendsToOut(t *testing.T) {
	var u URIRules
	out, _, f := u.Normalise([]byte("keep"), nil, []byte("/a/../b"))
	if f != FaultNone || string(out) != "keep/b" {
		t.Fatalf("got %q, %v", out, f)
	}
	out, _, f = u.Normalise([]byte("keep"), nil, []byte("/a/b;c"))
	if f != FaultParams || string(out) != "keep" {
		t.Fatalf("refusal left %q, %v", out, f)
	}
}

func TestMethodCase(t *testing.T) {
	var strict URIRules
	if m, f := strict.Method(nil, []byte("POST")); f != FaultNone || string(m) != "POST" {
		t.Fatalf("POST: %q %v", m, f)
	}
	for _, m := range []string{"post", "Post", "pOST"} {
		if _, f := strict.Method(nil, []byte(m)); f != FaultMethodCase {
			t.Errorf("%s: %v, want FaultMethodCase", m, f)
		}
	}
	folding := URIRules{CaseInsensitive: true}
	if m, f := folding.Method(make([]byte, 0, 24), []byte("post")); f != FaultNone || string(m) != "POST" {
		t.Fatalf("case-insensitive post: %q %v", m, f)
	}
}

func TestQueryOverridesMethod(t *testing.T) {
	for _, q := range []string{"_method=DELETE", "a=1&_method=PUT", "a=1;_method=PUT", "_METHOD=x", "%5Fmethod=x",
		"%5fmethod", "_method", "x=1&_method"} {
		if !QueryOverridesMethod([]byte(q)) {
			t.Errorf("%q: no override seen", q)
		}
	}
	for _, q := range []string{"", "method=DELETE", "_methods=x", "x_method=1", "a=_method", "_metho=1", "_method_=1", "__method=1"} {
		if QueryOverridesMethod([]byte(q)) {
			t.Errorf("%q: an override seen", q)
		}
	}
}

// TestReadingAllocatesNothing: CheckTarget, Normalise (with room in its
// buffers), Method and QueryOverridesMethod allocate nothing.
func TestReadingAllocatesNothing(t *testing.T) {
	u := URIRules{PathParams: Strip, Backslash: AsSlash, EncodedSeparators: Decode, TrailingDot: Strip, CaseInsensitive: true}
	target := []byte("/V1/./x/..;/Files%2Fa./b\\c?_method=x&y=" + strings.Repeat("z", 64))
	out, dec, m := make([]byte, 0, 512), make([]byte, 0, 512), make([]byte, 0, 24)
	allocs := testing.AllocsPerRun(100, func() {
		path, query, f := CheckTarget(target)
		if f != FaultNone {
			t.Fatal(f)
		}
		if out, dec, f = u.Normalise(out[:0], dec, path); f != FaultNone || string(out) != "/v1/files/a/b/c" {
			t.Fatalf("%q %v", out, f)
		}
		if _, f = u.Method(m, []byte("post")); f != FaultNone || !QueryOverridesMethod(query) {
			t.Fatal("method")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per read", allocs)
	}
}

// TestFaultDetailsNeedNoEscaping: details are written into problem+json
// as they are.
func TestFaultDetailsNeedNoEscaping(t *testing.T) {
	for f := FaultNone; f <= FaultMethodOverride; f++ {
		if d := f.Detail(); strings.ContainsAny(d, "\"\\") || (f != FaultNone && d == "") {
			t.Errorf("fault %d: detail %q", f, d)
		}
		for _, c := range []byte(f.Detail()) {
			if c < 0x20 || c > 0x7e {
				t.Errorf("fault %d: detail byte %#x", f, c)
			}
		}
	}
}
