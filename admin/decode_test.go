package admin

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/core"
)

type decodeTarget struct {
	Units core.CostUnits `json:"units"`
	Name  string         `json:"name"`
	Flag  *bool          `json:"flag"`
}

func decodeString(body string, emptyOK bool) (decodeTarget, error) {
	var v decodeTarget
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	err := decodeBody(httptest.NewRecorder(), r, &v, emptyOK)
	return v, err
}

func TestDecodeBody(t *testing.T) {
	v, err := decodeString(` {"units":5,"name":"x","flag":true} `, false)
	if err != nil || v.Units != 5 || v.Name != "x" || v.Flag == nil || !*v.Flag {
		t.Fatalf("%+v %v", v, err)
	}
	if _, err := decodeString("", true); err != nil {
		t.Fatalf("empty body where allowed: %v", err)
	}
	cases := []struct{ body, code, field string }{
		{``, codeInvalidJSON, ""},
		{`[]`, codeInvalidJSON, ""},
		{`{"units":1}{}`, codeInvalidJSON, ""},
		{`{"units":1`, codeInvalidJSON, ""},
		{`{"units":1,}`, codeInvalidJSON, ""},
		{`{"other":1}`, codeInvalidField, "other"},
		{`{"units":-1}`, codeInvalidField, "units"},
		{`{"units":0.5}`, codeInvalidField, "units"},
		{`{"units":1e2}`, codeInvalidField, "units"},
		{`{"units":"1"}`, codeInvalidField, "units"},
		{`{"units":18446744073709551616}`, codeInvalidField, "units"},
		{`{"name":5}`, codeInvalidField, "name"},
		{`{"flag":"yes"}`, codeInvalidField, "flag"},
		{`{"name":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, codeTooLarge, ""},
	}
	for _, c := range cases {
		_, err := decodeString(c.body, false)
		var e *apiError
		if !errors.As(err, &e) || e.code != c.code || e.field != c.field {
			t.Errorf("%.40s: %v, want %s %q", c.body, err, c.code, c.field)
		}
	}
}

func TestCheckUnits(t *testing.T) {
	if checkUnits("u", maxUnits) != nil {
		t.Fatal("2^63-1 refused")
	}
	var e *apiError
	if !errors.As(checkUnits("u", maxUnits+1), &e) || e.field != "u" {
		t.Fatal("2^63 accepted")
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
