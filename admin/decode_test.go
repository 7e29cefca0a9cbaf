package admin

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

// decodeAll reads body as the object of a request with fields units
// (required), name and flag, the way handlers do.
func decodeAll(body string, emptyOK bool) error {
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	o, err := decodeObject(httptest.NewRecorder(), r, emptyOK)
	if err != nil {
		return err
	}
	if err := o.only("units", "name", "flag", "parent", "n"); err != nil {
		return err
	}
	if _, _, err := o.units("units", !emptyOK); err != nil {
		return err
	}
	if _, _, err := o.str("name", false, 8); err != nil {
		return err
	}
	if _, _, err := o.boolean("flag", false); err != nil {
		return err
	}
	if _, _, err := o.nullableStr("parent", 8); err != nil {
		return err
	}
	_, _, err = o.integer("n", false, -5, 5)
	return err
}

func TestDecodeObject(t *testing.T) {
	for _, body := range []string{` {"units":5,"name":"x","flag":true} `, `{"units":0,"parent":null}`, `{"units":9223372036854775807,"n":-5}`} {
		if err := decodeAll(body, false); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	if err := decodeAll("", true); err != nil {
		t.Fatalf("empty body where allowed: %v", err)
	}
	cases := []struct{ body, code, field string }{
		{``, codeInvalidJSON, ""},
		{`[]`, codeInvalidJSON, ""},
		{`{"units":1}{}`, codeInvalidJSON, ""},
		{`{"units":1`, codeInvalidJSON, ""},
		{`{"units":1,}`, codeInvalidJSON, ""},
		{`{"other":1,"units":1}`, codeInvalidField, "other"},
		{`{"Units":1}`, codeInvalidField, "Units"}, // no case-insensitive matching
		{`{}`, codeInvalidField, "units"},
		{`{"units":null}`, codeInvalidField, "units"},
		{`{"units":-1}`, codeInvalidField, "units"},
		{`{"units":-0.5}`, codeInvalidField, "units"},
		{`{"units":0.5}`, codeInvalidField, "units"},
		{`{"units":2.0}`, codeInvalidField, "units"},
		{`{"units":1e2}`, codeInvalidField, "units"},
		{`{"units":"1"}`, codeInvalidField, "units"},
		{`{"units":"NaN"}`, codeInvalidField, "units"},
		{`{"units":true}`, codeInvalidField, "units"},
		{`{"units":{}}`, codeInvalidField, "units"},
		{`{"units":9223372036854775808}`, codeInvalidField, "units"},
		{`{"units":18446744073709551616}`, codeInvalidField, "units"},
		{`{"units":` + strings.Repeat("9", 400) + `}`, codeInvalidField, "units"},
		{`{"units":-` + strings.Repeat("9", 400) + `}`, codeInvalidField, "units"},
		{`{"units":1,"n":6}`, codeInvalidField, "n"},
		{`{"units":1,"n":-6}`, codeInvalidField, "n"},
		{`{"units":1,"name":5}`, codeInvalidField, "name"},
		{`{"units":1,"name":null}`, codeInvalidField, "name"},
		{`{"units":1,"name":"123456789"}`, codeInvalidField, "name"},
		{`{"units":1,"name":"` + "\xff\xfe" + `"}`, codeInvalidField, "name"},
		{`{"units":1,"` + "\xff" + `":1}`, codeInvalidJSON, ""}, // in a key: no field to name
		{`{"units":1,"flag":"yes"}`, codeInvalidField, "flag"},
		{`{"units":1,"flag":null}`, codeInvalidField, "flag"},
		{`{"units":1,"parent":7}`, codeInvalidField, "parent"},
		{`{"units":1,"units":2}`, codeDuplicateField, "units"},
		{`{"units":1,"u\u006eits":2}`, codeDuplicateField, "units"},
		{`{"units":1,"name":{"a":1,"a":2}}`, codeDuplicateField, "name.a"},
		{`{"units":1,"name":[{"a":1},{"b":1,"b":2}]}`, codeDuplicateField, "name[1].b"},
		{`{"units":1,"name":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, codeTooLarge, ""},
	}
	for _, c := range cases {
		err := decodeAll(c.body, false)
		var e *apiError
		if !errors.As(err, &e) || e.code != c.code || e.field != c.field || e.status != statuses[c.code] {
			t.Errorf("%.60q: %v, want %s %q", c.body, err, c.code, c.field)
		}
	}
}

// TestDuplicateKeyWalkIsBoundedAndSkipsDeepValues: nesting past the
// checked depth is skipped, not a reason to stop: a duplicate after it is
// still found.
func TestDuplicateKeyWalkIsBoundedAndSkipsDeepValues(t *testing.T) {
	deep := strings.Repeat(`{"a":`, maxNestingChecked+5) + `{"k":1,"k":2}` + strings.Repeat("}", maxNestingChecked+5)
	if _, dup := duplicateKey([]byte(deep)); dup {
		t.Fatal("walked past its depth")
	}
	if p, dup := duplicateKey([]byte(`{"x":` + deep + `,"status":"active","status":"closed"}`)); !dup || p != "status" {
		t.Fatalf("duplicate after a deep value: %q %v", p, dup)
	}
	huge := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	if _, dup := duplicateKey([]byte(huge)); dup {
		t.Fatal("arrays have no keys")
	}
}

func TestWriteJSONRefusesUnencodable(t *testing.T) {
	w := httptest.NewRecorder()
	if err := writeJSON(w, 200, map[string]any{"x": func() {}}); err == nil {
		t.Fatal("encoded a func")
	}
	if w.Body.Len() != 0 || w.Header().Get("Content-Type") != "" {
		t.Fatal("wrote something before failing")
	}
}
