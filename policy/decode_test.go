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
