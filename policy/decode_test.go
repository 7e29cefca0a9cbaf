package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckDuplicateKeys(t *testing.T) {
	cases := map[string]string{
		`{"a":1,"a":2}`:                         "a",
		`{"a":{"b":1,"c":{"b":2},"b":3}}`:       "a.b",
		`{"p":[{"x":1},{"x":1,"x":2}]}`:         "p[1].x",
		`{"p":[[{"y":1,"y":1}]]}`:               "p[0][0].y",
		`{"a":{"b":1},"c":{"b":1},"d":[1,1,1]}`: "",
		`{"a":1,"b"`:                            "", // a syntax error is the decoder's to report
		`{"a":1 "a":2}`:                         "",
	}
	for doc, field := range cases {
		err := checkDuplicateKeys([]byte(doc))
		if field == "" {
			if err != nil {
				t.Errorf("%s: %v", doc, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || fe.Problem != "duplicate key" {
			t.Errorf("%s: %v, want duplicate %s", doc, err, field)
		}
	}
}

func TestCheckDuplicateKeysStopsAtDepth(t *testing.T) {
	// Below maxWalkDepth nothing is a valid field, so duplicates there are
	// left to the decoder's type errors; the walk must stay cheap.
	deep := strings.Repeat(`{"a":`, maxWalkDepth+2) + `{"k":1,"k":2}` + strings.Repeat("}", maxWalkDepth+2)
	if err := checkDuplicateKeys([]byte(deep)); err != nil {
		t.Fatalf("walked past its depth: %v", err)
	}
	if _, err := Parse([]byte(deep)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("deep document: %v", err)
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	_, err := Parse([]byte(`{"limits":{"max_items":10,"request_rate":-1}}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "limits.request_rate" || !strings.Contains(fe.Problem, "[0, 4294967295]") {
		t.Fatalf("%v", err)
	}
	_, err = Parse([]byte(`{"limits":{"max_items":10,"hold_timeout_ms":1.5}}`))
	if !errors.As(err, &fe) || fe.Field != "limits.hold_timeout_ms" || !strings.Contains(fe.Problem, "an integer") {
		t.Fatalf("%v", err)
	}
	_, err = Parse([]byte(`{"operations":[]}`))
	if !errors.As(err, &fe) || fe.Field != "operations" || !strings.Contains(fe.Problem, "an object") {
		t.Fatalf("%v", err)
	}
	_, err = Parse([]byte(`{"mode":true}`))
	if !errors.As(err, &fe) || fe.Field != "mode" || !strings.Contains(fe.Problem, "a string") {
		t.Fatalf("%v", err)
	}
	if (&FieldError{Problem: "whole"}).Error() != "policy: whole" {
		t.Fatal("FieldError without a field")
	}
}

// TestDuplicatesAreFoundPastDeepValuesAndCaseVariants: the walk used to
// stop at its depth bound, so a key repeated after a deeply nested value
// was never compared; and keys differing only in case are one field to
// encoding/json, which keeps the last. Both are duplicates.
func TestDuplicatesAreFoundPastDeepValuesAndCaseVariants(t *testing.T) {
	deep := strings.Repeat("[", maxWalkDepth+3) + strings.Repeat("]", maxWalkDepth+3)
	for doc, field := range map[string]string{
		`{"x":` + deep + `,"mode":"strict","mode":"elastic"}`:                    "mode",
		`{"mode":"strict","MODE":"elastic"}`:                                     "MODE",
		`{"limits":{"max_items":1,"Max_Items":2}}`:                               "limits.Max_Items",
		`{"limits":{"max_items":1},"limitS":{"max_items":2}}`:                    "limitS",
		`{"operations":{"a":{"weight":1,"weight":2}},"operations":{}}`:           "operations.a.weight",
		`{"operations":{"a":{"weight":1}},"permissions":[],"permissions":["x"]}`: "permissions",
	} {
		err := checkDuplicateKeys([]byte(doc))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, ErrDuplicateKey) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want a duplicate %s", doc, err, field)
		}
		if _, err := Parse([]byte(doc)); !errors.Is(err, ErrDuplicateKey) {
			t.Errorf("Parse(%s): %v", doc, err)
		}
	}
}

// TestNullIsRefusedNotDefaulted: encoding/json leaves a field alone for
// null, so "mode":null would silently mean strict and "fixed_cost":null 0.
func TestNullIsRefusedNotDefaulted(t *testing.T) {
	for doc, field := range map[string]string{
		`{"mode":null,"operations":{"a":{"weight":1}},"limits":{"max_items":1}}`:          "mode",
		`{"operations":{"a":{"weight":1,"permission":null}},"limits":{"max_items":1}}`:    "operations.a.permission",
		`{"operations":{"a":{"weight":1}},"limits":{"max_items":1},"permissions":[null]}`: "permissions[0]",
	} {
		_, err := Parse([]byte(doc))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || !strings.Contains(fe.Problem, "null") || errors.Is(err, ErrDuplicateKey) {
			t.Errorf("%s: %v, want null refused at %s", doc, err, field)
		}
	}
}

// TestNullWhereTheDocumentTakesOne: an optional part (a pointer in the
// document) takes null as its absence — the canonical form of routes
// without a default says "default":null, and must parse again.
func TestNullWhereTheDocumentTakesOne(t *testing.T) {
	doc := `{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"rules":[{"method":"GET","path":"/v1/x","op":"requests","count":1}]}}`
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	canonical := Canonical(d)
	if !strings.Contains(string(canonical), `"default":null`) {
		t.Fatalf("canonical %s", canonical)
	}
	if _, err := Parse(canonical); err != nil {
		t.Fatalf("the canonical form does not parse: %v", err)
	}
	if _, err := Parse([]byte(`{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":null}`)); err != nil {
		t.Fatalf("routes null: %v", err)
	}
	_, err = Parse([]byte(`{"operations":{"requests":{"weight":1}},"limits":{"max_items":10},"routes":{"rules":null}}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "routes.rules" {
		t.Fatalf("rules null: %v", err)
	}
}
