package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tollgated/tollgated/core"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 64 << 10

// maxUnits is the largest amount the API accepts. Amounts are uint64
// inside, but JSON clients and the ledger's SQL backends are signed 64-bit:
// refusing the top half here means no client ever sees a number it cannot
// hold, and no backend one it cannot store.
const maxUnits = core.CostUnits(math.MaxInt64)

// maxNestingChecked is how deep the duplicate-key walk looks. No admin body
// nests at all, so anything deeper is refused as a wrong type whatever its
// keys; the walk skips it without looking, so adversarial nesting costs a
// linear scan and never a deep recursion.
const maxNestingChecked = 16

// readBody reads the whole body, at most MaxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			return nil, problemf(codeTooLarge, "request bodies are at most %d bytes", MaxBodyBytes)
		}
		return nil, problemf(codeInvalidJSON, "reading the body: %v", err)
	}
	return b, nil
}

// object is a request body's JSON object, checked as a whole before any
// field is read: one object and nothing after it, valid UTF-8, no key
// given twice at any depth. Fields keep their raw JSON, so each reader
// below tells a missing field from null from a wrong type, and names the
// field in every refusal.
type object map[string]json.RawMessage

// decodeObject reads the body as an object. An empty body is the empty
// object when emptyOK (requests whose every field is optional).
func decodeObject(w http.ResponseWriter, r *http.Request, emptyOK bool) (object, error) {
	b, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	return parseObject(b, emptyOK)
}

func parseObject(b []byte, emptyOK bool) (object, error) {
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	if len(trimmed) == 0 {
		if emptyOK {
			return object{}, nil
		}
		return nil, problemf(codeInvalidJSON, "the body is empty; a JSON object is required")
	}
	if trimmed[0] != '{' {
		return nil, problemf(codeInvalidJSON, "the body must be a JSON object")
	}
	if !json.Valid(b) {
		// Decode to name the syntax error and where it is.
		err := json.Unmarshal(b, new(any))
		if err == nil {
			err = errors.New("not one JSON value")
		}
		return nil, problemf(codeInvalidJSON, "%s", plain(err))
	}
	if path, dup := duplicateKey(b); dup {
		return nil, codeProblem(codeDuplicateField, path, "is given twice; each field once")
	}
	var o object
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, problemf(codeInvalidJSON, "%s", plain(err))
	}
	if !utf8.Valid(b) {
		// encoding/json replaces invalid UTF-8 silently; the raw values
		// kept it, so the field is named when it is in a value.
		for _, name := range slices.Sorted(maps.Keys(o)) {
			if !utf8.Valid(o[name]) {
				return nil, fieldProblem(name, "is not valid UTF-8")
			}
		}
		return nil, problemf(codeInvalidJSON, "the body is not valid UTF-8")
	}
	return o, nil
}

// duplicateKey reports the dotted path of the first key an object of the
// (valid) JSON document b names twice, at any depth up to
// maxNestingChecked.
func duplicateKey(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	path, dup := walkDuplicates(dec, "", 0)
	return path, dup
}

// walkDuplicates reads one value from dec. Syntax errors cannot happen:
// the caller checked b is valid JSON.
func walkDuplicates(dec *json.Decoder, path string, depth int) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	delim, ok := tok.(json.Delim)
	if !ok || delim == '}' || delim == ']' {
		return "", false
	}
	if depth >= maxNestingChecked {
		skipValue(dec)
		return "", false
	}
	if delim == '[' {
		for i := 0; dec.More(); i++ {
			if p, dup := walkDuplicates(dec, path+"["+strconv.Itoa(i)+"]", depth+1); dup {
				return p, true
			}
		}
		dec.Token() // ]
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return "", false
		}
		key, _ := kt.(string)
		p := fieldName(key)
		if path != "" {
			p = path + "." + p
		}
		if seen[key] {
			return p, true
		}
		seen[key] = true
		if p, dup := walkDuplicates(dec, p, depth+1); dup {
			return p, true
		}
	}
	dec.Token() // }
	return "", false
}

// skipValue consumes the rest of an array or object whose opening
// delimiter was just read.
func skipValue(dec *json.Decoder) {
	for open := 1; open > 0; {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			open++
		case json.Delim('}'), json.Delim(']'):
			open--
		}
	}
}

// only refuses any field but names, naming the first unknown one in
// sorted order (so the answer does not depend on map order).
func (o object) only(names ...string) error {
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if !slices.Contains(names, k) {
			return fieldProblem(fieldName(k), "unknown field")
		}
	}
	return nil
}

// fieldName is how a problem names the key k: as is, but the empty key as
// "" (a problem without a field would not say which one is wrong).
func fieldName(k string) string {
	if k == "" {
		return `""`
	}
	return k
}

// kind is a raw JSON value's type, for refusals.
func kind(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// field returns name's raw value. It is an error if name is missing and
// required, or null (no admin field takes null unless its reader says so).
func (o object) field(name string, required bool) (json.RawMessage, bool, error) {
	raw, ok := o[name]
	if !ok {
		if required {
			return nil, false, fieldProblem(name, "is required")
		}
		return nil, false, nil
	}
	if raw[0] == 'n' {
		return nil, false, fieldProblem(name, "must not be null")
	}
	return raw, true, nil
}

// str reads a string field of at most maxLen bytes. Present-but-empty is
// returned as such: callers that need a value check it.
func (o object) str(name string, required bool, maxLen int) (string, bool, error) {
	raw, ok, err := o.field(name, required)
	if !ok || err != nil {
		return "", ok, err
	}
	return stringValue(name, raw, maxLen)
}

// nullableStr reads a string field that may also be null: (nil, false)
// when missing, (nil, true) when null.
func (o object) nullableStr(name string, maxLen int) (*string, bool, error) {
	raw, ok := o[name]
	if !ok {
		return nil, false, nil
	}
	if raw[0] == 'n' {
		return nil, true, nil
	}
	s, _, err := stringValue(name, raw, maxLen)
	if err != nil {
		return nil, true, err
	}
	return &s, true, nil
}

func stringValue(name string, raw json.RawMessage, maxLen int) (string, bool, error) {
	if raw[0] != '"' {
		return "", true, fieldProblem(name, "must be a string, not %s", kind(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", true, fieldProblem(name, "is not a valid string: %v", err)
	}
	if len(s) > maxLen {
		return "", true, fieldProblem(name, "must be at most %d bytes, not %d", maxLen, len(s))
	}
	return s, true, nil
}

// boolean reads a true/false field.
func (o object) boolean(name string, required bool) (bool, bool, error) {
	raw, ok, err := o.field(name, required)
	if !ok || err != nil {
		return false, ok, err
	}
	switch string(raw) {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, true, fieldProblem(name, "must be true or false, not %s", kind(raw))
}

// units reads an amount: a JSON integer from 0 to 2^63−1, written without
// sign, fraction or exponent (2.0 and 1e3 are refused: an amount is
// counted, never measured).
func (o object) units(name string, required bool) (core.CostUnits, bool, error) {
	raw, ok, err := o.field(name, required)
	if !ok || err != nil {
		return 0, ok, err
	}
	n, err := integer(name, raw, 0, math.MaxInt64)
	return core.CostUnits(n), true, err
}

// integer reads a field that must be a JSON integer in [lo, hi].
func (o object) integer(name string, required bool, lo, hi int64) (int64, bool, error) {
	raw, ok, err := o.field(name, required)
	if !ok || err != nil {
		return 0, ok, err
	}
	n, err := integer(name, raw, lo, hi)
	return n, true, err
}

func integer(name string, raw json.RawMessage, lo, hi int64) (int64, error) {
	if k := kind(raw); k != "a number" {
		return 0, fieldProblem(name, "must be an integer, not %s", k)
	}
	if bytes.ContainsAny(raw, ".eE") {
		return 0, fieldProblem(name, "must be an integer, not %s (no fraction or exponent)", raw)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	switch {
	case err != nil && raw[0] == '-', err == nil && n < lo:
		return 0, fieldProblem(name, "must be at least %d", lo)
	case err != nil, n > hi:
		return 0, fieldProblem(name, "must be at most %d", hi)
	}
	return n, nil
}

// timestamp reads an RFC 3339 time that may be null: (0, false) when
// missing or null.
func (o object) timestamp(name string) (int64, bool, error) {
	s, _, err := o.nullableStr(name, 64)
	if err != nil || s == nil {
		return 0, false, err
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return 0, false, fieldProblem(name, "must be an RFC 3339 time such as 2026-12-31T23:59:59Z, not %q", *s)
	}
	if t.Year() < 1970 || t.Year() > 2200 {
		return 0, false, fieldProblem(name, "must be between 1970 and 2200")
	}
	return t.UnixNano(), true, nil
}

// checkName refuses a label (of a key or token) with bytes a terminal or
// log line would misread: control characters.
func checkName(field, s string) error {
	for _, r := range s {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fieldProblem(field, "must not contain control characters")
		}
	}
	return nil
}

// writeJSON answers v with status. It fails only before anything is
// written, so the caller can still answer with a problem; a failed write
// means the client has gone, and there is no one left to tell.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("admin: encoding the response: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}
