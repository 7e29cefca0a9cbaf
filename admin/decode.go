package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/tollgated/tollgated/core"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 64 << 10

// maxUnits is the largest amount the API accepts. Amounts are uint64
// inside, but JSON clients and the ledger's SQL backends are signed 64-bit:
// refusing the top half here means no client ever sees a number it cannot
// hold, and no backend one it cannot store.
const maxUnits = core.CostUnits(math.MaxInt64)

// readBody reads the whole body, at most MaxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, problemf(codeTooLarge, "request bodies are at most %d bytes", MaxBodyBytes)
		}
		return nil, problemf(codeInvalidJSON, "reading the body: %v", err)
	}
	return b, nil
}

// decodeBody reads and decodes one JSON object into dst, refusing unknown
// fields, wrong types and trailing data. An empty body decodes as {} when
// emptyOK (for requests whose every field is optional).
func decodeBody(w http.ResponseWriter, r *http.Request, dst any, emptyOK bool) error {
	b, err := readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if emptyOK {
			return nil
		}
		return problemf(codeInvalidJSON, "the body is empty; a JSON object is required")
	}
	if b = bytes.TrimLeft(b, " \t\r\n"); b[0] != '{' {
		return problemf(codeInvalidJSON, "the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return problemf(codeInvalidJSON, "data after the JSON object")
	}
	return nil
}

// decodeError names the field encoding/json refused, when there is one.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fieldProblem(te.Field, "must be %s, not %s", describeType(te.Type), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		return fieldProblem(name, "unknown field")
	}
	return problemf(codeInvalidJSON, "%v", err)
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint64:
		return "a non-negative integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Pointer:
		return describeType(t.Elem())
	}
	return t.String()
}

// checkUnits refuses an amount above maxUnits. Negative numbers, fractions
// and exponents never get here: they do not decode into an unsigned field.
func checkUnits(field string, v core.CostUnits) error {
	if v > maxUnits {
		return fieldProblem(field, "must be at most %d", maxUnits)
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
