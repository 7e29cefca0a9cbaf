package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tollgated/tollgated/ledger"
)

// apiError is an error the admin API answers as application/problem+json
// with a stable code. Handlers return one; anything else they return is an
// internal error, logged but never shown.
type apiError struct {
	status int
	code   string
	title  string
	detail string
	field  string
	// permission is what a 403 forbidden lacked (roles.go).
	permission string
}

func (e *apiError) Error() string {
	if e.field != "" {
		return fmt.Sprintf("%s (%d): %s: %s", e.code, e.status, e.field, e.detail)
	}
	return fmt.Sprintf("%s (%d): %s", e.code, e.status, e.detail)
}

// The stable codes. docs/API.md lists each; titles are for people.
const (
	codeInvalidJSON      = "invalid-json"
	codeInvalidField     = "invalid-field"
	codeDuplicateField   = "duplicate-field"
	codeInvalidQuery     = "invalid-query"
	codeTooLarge         = "too-large"
	codeUnauthorized     = "unauthorized"
	codeForbidden        = "forbidden"
	codeUnknownAccount   = "unknown-account"
	codeNotFound         = "not-found"
	codeMethodNotAllowed = "method-not-allowed"
	codeConflict         = "conflict"
	codeClosedAccount    = "closed-account"
	codeOverflow         = "overflow"
	codeBusy             = "busy"
	codeUnavailable      = "unavailable"
	codeStorageFull      = "storage-full"
	codeStorageFailed    = "storage-failed"
	codeInternal         = "internal"
	// The billed-event stream's cursor (events.go).
	codeCursorExpired = "cursor-expired"
	codeCursorAhead   = "cursor-ahead"

	// What the listener answers for requests net/http refuses before any
	// handler sees them (listener.go).
	codeMalformedRequest   = "malformed-request"
	codeHeadersTooLarge    = "headers-too-large"
	codeUnsupportedFraming = "unsupported-framing"
	codeTooManyConnections = "too-many-connections"
)

var titles = map[string]string{
	codeInvalidJSON:        "Body is not valid JSON",
	codeInvalidField:       "A field is invalid",
	codeDuplicateField:     "A field is given twice",
	codeInvalidQuery:       "A query parameter is invalid",
	codeTooLarge:           "Body too large",
	codeUnauthorized:       "Admin token required",
	codeForbidden:          "The admin token's role does not allow this",
	codeUnknownAccount:     "No such account",
	codeNotFound:           "Not found",
	codeMethodNotAllowed:   "Method not allowed",
	codeConflict:           "Conflicts with existing state",
	codeClosedAccount:      "Account is closed",
	codeOverflow:           "Amount would overflow",
	codeBusy:               "Already running",
	codeUnavailable:        "Unavailable",
	codeStorageFull:        "Usage storage is full",
	codeStorageFailed:      "Usage storage failed",
	codeInternal:           "Internal error",
	codeCursorExpired:      "Events no longer kept",
	codeCursorAhead:        "Cursor beyond the stream",
	codeMalformedRequest:   "Malformed request",
	codeHeadersTooLarge:    "Request headers too large",
	codeUnsupportedFraming: "Unsupported request framing",
	codeTooManyConnections: "Too many connections",
}

var statuses = map[string]int{
	codeInvalidJSON:        http.StatusBadRequest,
	codeInvalidField:       http.StatusBadRequest,
	codeDuplicateField:     http.StatusBadRequest,
	codeInvalidQuery:       http.StatusBadRequest,
	codeTooLarge:           http.StatusRequestEntityTooLarge,
	codeUnauthorized:       http.StatusUnauthorized,
	codeForbidden:          http.StatusForbidden,
	codeUnknownAccount:     http.StatusNotFound,
	codeNotFound:           http.StatusNotFound,
	codeMethodNotAllowed:   http.StatusMethodNotAllowed,
	codeConflict:           http.StatusConflict,
	codeClosedAccount:      http.StatusConflict,
	codeOverflow:           http.StatusUnprocessableEntity,
	codeBusy:               http.StatusConflict,
	codeUnavailable:        http.StatusServiceUnavailable,
	codeStorageFull:        http.StatusServiceUnavailable,
	codeStorageFailed:      http.StatusServiceUnavailable,
	codeInternal:           http.StatusInternalServerError,
	codeCursorExpired:      http.StatusGone,
	codeCursorAhead:        http.StatusConflict,
	codeMalformedRequest:   http.StatusBadRequest,
	codeHeadersTooLarge:    http.StatusRequestHeaderFieldsTooLarge,
	codeUnsupportedFraming: http.StatusNotImplemented,
	codeTooManyConnections: http.StatusServiceUnavailable,
}

func problemf(code, format string, args ...any) *apiError {
	return &apiError{status: statuses[code], code: code, title: titles[code], detail: fmt.Sprintf(format, args...)}
}

func fieldProblem(field, format string, args ...any) *apiError {
	return codeProblem(codeInvalidField, field, format, args...)
}

// codeProblem is a problem with code about field (of a body or a query).
func codeProblem(code, field, format string, args ...any) *apiError {
	e := problemf(code, format, args...)
	e.field = field
	return e
}

// problem is the wire form (RFC 9457), shaped like the data plane's:
// type, title, status, code, plus detail and, for a problem with one field
// of a body or query (invalid-field, duplicate-field, invalid-query),
// field; a 403 forbidden names the permission the token lacked.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Code       string `json:"code"`
	Detail     string `json:"detail,omitempty"`
	Field      string `json:"field,omitempty"`
	Permission string `json:"permission,omitempty"`
}

// writeProblem answers e. A 401 carries the Bearer challenge; a token was
// presented if the request had an Authorization header, which RFC 6750
// answers with error="invalid_token".
func writeProblem(w http.ResponseWriter, r *http.Request, e *apiError) {
	h := w.Header()
	if e.status == http.StatusUnauthorized {
		challenge := `Bearer realm="tollgated-admin"`
		if r.Header.Get("Authorization") != "" {
			challenge += `, error="invalid_token"`
		}
		h.Set("WWW-Authenticate", challenge)
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body())
}

// body is e's problem+json encoding, with a final newline.
func (e *apiError) body() []byte {
	b, err := json.Marshal(problem{Type: "about:blank", Title: e.title, Status: e.status, Code: e.code, Detail: e.detail,
		Field: e.field, Permission: e.permission})
	if err != nil {
		panic("admin: a problem of strings and an int did not encode: " + err.Error())
	}
	return append(b, '\n')
}

// ledgerError maps a store error onto the API's codes. notFound is the
// answer for ledger.ErrNotFound, which means different things per route
// (an unknown account, key or token). The detail is what the store said
// after its error's kind (the code and title say that), never the name of
// a package. Errors without an API meaning come back wrapped, for the
// caller to log as internal.
func ledgerError(err error, notFound *apiError) error {
	var e *apiError
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, ledger.ErrNotFound):
		return notFound
	case errors.Is(err, ledger.ErrClosedAccount):
		return problemf(codeClosedAccount, "%s (closed is final)", detailAfter(err, ledger.ErrClosedAccount))
	case errors.Is(err, ledger.ErrConflict):
		return problemf(codeConflict, "%s", detailAfter(err, ledger.ErrConflict))
	case errors.Is(err, ledger.ErrOverflow):
		return problemf(codeOverflow, "the change would take one of the account's amounts past what the ledger can hold; nothing changed")
	case errors.Is(err, ledger.ErrInvalid):
		return problemf(codeInvalidField, "%s", detailAfter(err, ledger.ErrInvalid))
	}
	return fmt.Errorf("admin: ledger: %w", err)
}

// detailAfter is what err says after kind's own message ("ledger: account
// is closed: acme cannot become active" → "acme cannot become active"), or
// kind's message without its package when it says nothing more.
func detailAfter(err, kind error) string {
	msg, k := err.Error(), kind.Error()
	if i := strings.Index(msg, k+": "); i >= 0 {
		return plain(errors.New(msg[i+len(k)+2:]))
	}
	_, plain, _ := strings.Cut(k, ": ")
	return plain
}

// plain is err's message without the names of the packages that made it
// ("core: account id must…" → "account id must…"): a detail speaks the
// API's words, not the code's.
func plain(err error) string {
	msg := err.Error()
	for _, pkg := range []string{"core: ", "ledger: ", "policy: ", "json: "} {
		msg = strings.ReplaceAll(msg, pkg, "")
	}
	return msg
}
