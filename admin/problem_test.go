package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgated/tollgated/ledger"
)

var errTest = errors.New("test failure")

func TestEveryCodeHasATitleAndStatus(t *testing.T) {
	for _, c := range []string{codeInvalidJSON, codeInvalidField, codeInvalidQuery, codeTooLarge, codeUnauthorized,
		codeUnknownAccount, codeNotFound, codeMethodNotAllowed, codeConflict, codeClosedAccount, codeOverflow, codeInternal,
		codeCursorExpired, codeCursorAhead} {
		if titles[c] == "" || statuses[c] < 400 {
			t.Errorf("%s: title %q status %d", c, titles[c], statuses[c])
		}
	}
	if len(titles) != len(statuses) {
		t.Fatal("titles and statuses disagree")
	}
}

func TestLedgerErrorMapping(t *testing.T) {
	nf := problemf(codeUnknownAccount, "x")
	for _, c := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("wrapped: %w", ledger.ErrNotFound), codeUnknownAccount},
		{fmt.Errorf("wrapped: %w", ledger.ErrConflict), codeConflict},
		{fmt.Errorf("wrapped: %w", ledger.ErrClosedAccount), codeClosedAccount},
		{fmt.Errorf("wrapped: %w", ledger.ErrOverflow), codeOverflow},
		{fmt.Errorf("wrapped: %w", ledger.ErrInvalid), codeInvalidField},
		{problemf(codeConflict, "as is"), codeConflict},
	} {
		var e *apiError
		if !errors.As(ledgerError(c.err, nf), &e) || e.code != c.code {
			t.Errorf("%v: %v, want %s", c.err, e, c.code)
		}
	}
	err := ledgerError(errTest, nf)
	var e *apiError
	if errors.As(err, &e) || !errors.Is(err, errTest) {
		t.Fatalf("an unknown error must stay internal and wrapped: %v", err)
	}
}

func TestWriteProblem(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	writeProblem(w, r, fieldProblem("units", "must be positive"))
	if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "about:blank", "title": "A field is invalid", "status": 400.0, "code": "invalid-field",
		"detail": "must be positive", "field": "units"}
	if len(p) != len(want) {
		t.Fatalf("problem %v", p)
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %v, want %v", k, p[k], v)
		}
	}
	if w.Header().Get("WWW-Authenticate") != "" {
		t.Fatal("challenge on a non-401")
	}
}
