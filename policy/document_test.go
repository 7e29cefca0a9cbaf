package policy

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// example is the document shape from the admin API brief.
const example = `{"permissions":["chat","embed"],
 "operations":{"input_tokens":{"weight":1,"permission":"chat"},"requests":{"weight":0}},
 "fixed_cost":0, "minimum_cost":0,
 "limits":{"max_items":100000,"request_rate":0,"request_burst":0,"unit_rate":0,"unit_burst":0,
           "max_concurrent":0,"principal_max_concurrent":0,"hold_timeout_ms":30000},
 "mode":"strict", "overage_cap":0, "deny_threshold":0}`

func TestParseExample(t *testing.T) {
	d, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Permissions) != 2 || d.Operations["input_tokens"].Permission != "chat" || d.Limits.MaxItems != 100000 {
		t.Fatalf("decoded %+v", d)
	}
}

func TestParseFillsDefaults(t *testing.T) {
	d, err := Parse([]byte(`{"operations":{"a":{"weight":2}},"limits":{"max_items":10}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != ModeStrict || d.Limits.HoldTimeoutMS != DefaultHoldTimeoutMS || d.Permissions == nil {
		t.Fatalf("defaults not filled: %+v", d)
	}
}

func TestCanonicalIsStable(t *testing.T) {
	// The same policy, reordered, re-spaced and with defaults omitted,
	// must store the same bytes.
	a, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte(`{"deny_threshold":0,"limits":{"max_items":100000},
		"operations":{"requests":{"weight":0},"input_tokens":{"permission":"chat","weight":1}},
		"permissions":["chat","embed"]}`))
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := Canonical(a), Canonical(b)
	if !bytes.Equal(ca, cb) {
		t.Fatalf("canonical forms differ:\n%s\n%s", ca, cb)
	}
	again, err := Parse(ca)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(Canonical(again), ca) {
		t.Fatal("canonical form is not a fixed point")
	}
	want := `{"permissions":["chat","embed"],"operations":{"input_tokens":{"weight":1,"permission":"chat"},"requests":{"weight":0}},"fixed_cost":0,"minimum_cost":0,"limits":{"max_items":100000,"request_rate":0,"request_burst":0,"unit_rate":0,"unit_burst":0,"max_concurrent":0,"principal_max_concurrent":0,"hold_timeout_ms":30000},"mode":"strict","overage_cap":0,"deny_threshold":0}`
	if string(ca) != want {
		t.Fatalf("canonical\n got %s\nwant %s", ca, want)
	}
}

func TestCanonicalNormalisesAHandBuiltDocument(t *testing.T) {
	d := &Document{Operations: map[string]Operation{"u": {Weight: 1}}, Limits: Limits{MaxItems: 1}}
	if _, err := Parse(Canonical(d)); err != nil {
		t.Fatalf("canonical of a hand-built document does not parse: %v", err)
	}
	if d.Mode != "" {
		t.Fatal("Canonical modified its argument")
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	for _, doc := range []string{``, `null`, `[]`, `"x"`, `{`, `{"permissions":["a"]`, `{} {}`, `{}x`, `{"a" 1}`} {
		if _, err := Parse([]byte(doc)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", doc, err)
		}
	}
}

func TestParseRefusesTooLarge(t *testing.T) {
	doc := `{"operations":{"a":{"weight":1}},"limits":{"max_items":1}}` + strings.Repeat(" ", MaxDocumentSize)
	if _, err := Parse([]byte(doc)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
}

// TestParseNamesTheField checks each refusal names the field to fix.
func TestParseNamesTheField(t *testing.T) {
	base := func(extra string) string {
		return `{"permissions":["chat"],"operations":{"a":{"weight":1}},"limits":{"max_items":10}` + extra + `}`
	}
	cases := []struct{ doc, field string }{
		{base(`,"bogus":1`), "bogus"},
		{`{"operations":{"a":{"weight":1,"extra":2}},"limits":{"max_items":1}}`, "operations.a.extra"},
		{`{"limits":{"max_items":1,"unit_brst":5}}`, "limits.unit_brst"},
		{`{"Limits":{"Max_Items":1,"nope":5}}`, "Limits.nope"},
		{base(`,"mode":"strict","mode":"elastic"`), "mode"},
		{`{"operations":{"a":{"weight":1},"a":{"weight":2}},"limits":{"max_items":1}}`, "operations.a"},
		{`{"operations":{"a":{"weight":-1}},"limits":{"max_items":1}}`, "operations.weight"},
		{`{"operations":{"a":{"weight":1.5}},"limits":{"max_items":1}}`, "operations.weight"},
		{`{"operations":{"a":{"weight":"1"}},"limits":{"max_items":1}}`, "operations.weight"},
		{`{"operations":{"a":{"weight":9223372036854775808}},"limits":{"max_items":1}}`, "operations.a.weight"},
		{base(`,"fixed_cost":18446744073709551616`), "fixed_cost"},
		{base(`,"fixed_cost":9223372036854775808`), "fixed_cost"},
		{base(`,"minimum_cost":9223372036854775808`), "minimum_cost"},
		{base(`,"deny_threshold":9223372036854775808`), "deny_threshold"},
		{base(`,"mode":"lax"`), "mode"},
		{base(`,"overage_cap":5`), "overage_cap"},
		{base(`,"mode":"elastic"`), "overage_cap"},
		{base(`,"mode":"elastic","overage_cap":9223372036854775808`), "overage_cap"},
		{`{"permissions":["Chat"],"operations":{"a":{"weight":1}},"limits":{"max_items":1}}`, "permissions[0]"},
		{`{"permissions":[""],"operations":{"a":{"weight":1}},"limits":{"max_items":1}}`, "permissions[0]"},
		{`{"permissions":["a","b","a"],"operations":{"a":{"weight":1}},"limits":{"max_items":1}}`, "permissions[2]"},
		{`{"permissions":[1],"operations":{"a":{"weight":1}},"limits":{"max_items":1}}`, "permissions"},
		{`{"limits":{"max_items":1}}`, "operations"},
		{`{"operations":{"A":{"weight":1}},"limits":{"max_items":1}}`, "operations.A"},
		{`{"operations":{"a":{"weight":1,"permission":"nope"}},"limits":{"max_items":1}}`, "operations.a.permission"},
		{`{"operations":{"a":{"weight":0}},"limits":{"max_items":1}}`, "operations"},
		{`{"operations":{"a":{"weight":1}}}`, "limits.max_items"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"request_rate":5}}`, "limits.request_burst"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"unit_burst":5}}`, "limits.unit_burst"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"unit_rate":5,"unit_burst":9}}`, "limits.unit_burst"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"principal_max_concurrent":1}}`, "limits.principal_max_concurrent"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"max_concurrent":1,"principal_max_concurrent":2}}`, "limits.principal_max_concurrent"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"max_concurrent":2147483648}}`, "limits.max_concurrent"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"max_concurrent":4294967296}}`, "limits.max_concurrent"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"hold_timeout_ms":-1}}`, "limits.hold_timeout_ms"},
		{`{"operations":{"a":{"weight":1}},"limits":{"max_items":10,"hold_timeout_ms":86400001}}`, "limits.hold_timeout_ms"},
		{`{"operations":{"a":{"weight":4611686018427387904}},"limits":{"max_items":4}}`, "limits.max_items"},
		{`{"operations":{"a":{"weight":1}},"fixed_cost":9223372036854775807,"limits":{"max_items":9223372036854775807}}`, "limits.max_items"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want a field error", c.doc, err)
			continue
		}
		if fe.Field != c.field {
			t.Errorf("%s: field %q, want %q (%v)", c.doc, fe.Field, c.field, err)
		}
	}
}

func TestParseLimits(t *testing.T) {
	many := make([]string, MaxPermissions+1)
	for i := range many {
		many[i] = `"p` + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + `"`
	}
	doc := `{"permissions":[` + strings.Join(many, ",") + `],"operations":{"a":{"weight":1}},"limits":{"max_items":1}}`
	var fe *FieldError
	if _, err := Parse([]byte(doc)); !errors.As(err, &fe) || fe.Field != "permissions" {
		t.Fatalf("65 permissions: %v", err)
	}
	ops := make([]string, core.MaxOpClasses+1)
	for i := range ops {
		ops[i] = `"o` + strings.Repeat("x", i) + `":{"weight":1}`
	}
	doc = `{"operations":{` + strings.Join(ops, ",") + `},"limits":{"max_items":1}}`
	if _, err := Parse([]byte(doc)); !errors.As(err, &fe) || fe.Field != "operations" {
		t.Fatalf("257 classes: %v", err)
	}
	long := strings.Repeat("n", MaxNameLen+1)
	doc = `{"operations":{"` + long + `":{"weight":1}},"limits":{"max_items":1}}`
	if _, err := Parse([]byte(doc)); !errors.As(err, &fe) || fe.Field != "operations."+long {
		t.Fatalf("65-byte name: %v", err)
	}
}

func TestParseAcceptsTheEdges(t *testing.T) {
	names := make([]string, MaxPermissions)
	for i := range names {
		names[i] = `"p` + strings.Repeat("x", i) + `"`
	}
	doc := `{"permissions":[` + strings.Join(names, ",") + `],
		"operations":{"` + strings.Repeat("n", MaxNameLen) + `":{"weight":9223372036854775807,"permission":"p` + strings.Repeat("x", 63) + `"}},
		"limits":{"max_items":1,"hold_timeout_ms":86400000},
		"mode":"elastic","overage_cap":9223372036854775807,"deny_threshold":9223372036854775807}`
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(ledger.Account{AccountSpec: ledger.AccountSpec{ID: "edge"}, Policy: Canonical(d), PolicyGeneration: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshot.Permissions != ^core.PermissionSet(0) {
		t.Fatalf("64 permissions should set every bit, got %x", c.Snapshot.Permissions)
	}
	if c.Snapshot.Costs.Classes[0].Permission != 1<<63 {
		t.Fatalf("class permission bit %x", c.Snapshot.Costs.Classes[0].Permission)
	}
}

// FuzzParse: Parse never panics; whatever it accepts re-encodes to a fixed
// point and compiles into a snapshot that validates.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add(Canonical(Default()))
	f.Add([]byte(`{"operations":{"a":{"weight":3}},"fixed_cost":2,"minimum_cost":9,"limits":{"max_items":7,"unit_rate":10,"unit_burst":30},"mode":"elastic","overage_cap":5}`))
	f.Add([]byte(`{"operations":{"a":{"weight":1},"a":{"weight":1}},"limits":{"max_items":1}}`))
	f.Add([]byte(`{"permissions":[["x"]],"x":{}}`))
	f.Add([]byte(`[[[[{"a":[1,{"b":2,"b":3}]}]]]]`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		d, err := Parse(doc)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		c := Canonical(d)
		d2, err := Parse(c)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", c, err)
		}
		if !bytes.Equal(Canonical(d2), c) {
			t.Fatalf("canonical form is not a fixed point: %s", c)
		}
		comp, err := Compile(ledger.Account{AccountSpec: ledger.AccountSpec{ID: "fuzz"}, Policy: doc, PolicyGeneration: 1})
		if err != nil {
			t.Fatalf("accepted %s but it does not compile: %v", doc, err)
		}
		if err := comp.Snapshot.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}
