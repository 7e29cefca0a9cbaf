package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// decodeError turns encoding/json's errors on doc into ErrMalformed or a
// *FieldError that names the field with its path (limits.unit_brst).
func decodeError(doc []byte, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fieldErr(te.Field, "must be %s, not %s", describeType(te.Type), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		// The decoder names the key alone; the first unknown key in
		// document order is the one it refused.
		if path, ok := unknownFieldPath(doc); ok {
			name = path
		}
		return fieldErr(name, "unknown field")
	}
	return fmt.Errorf("%w: %w", ErrMalformed, err)
}

// unknownFieldPath is the path of the first key, in document order, that
// no field of a Document has, if there is one within maxWalkDepth.
func unknownFieldPath(doc []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var walk func(path string, depth int, t reflect.Type) (string, bool)
	walk = func(path string, depth int, t reflect.Type) (string, bool) {
		tok, err := dec.Token()
		if err != nil || (tok != json.Delim('{') && tok != json.Delim('[')) {
			return "", false
		}
		if depth >= maxWalkDepth {
			skipNested(dec)
			return "", false
		}
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			p, within := path+"["+strconv.Itoa(i)+"]", typeWithin(t, reflect.Slice, "")
			if tok == json.Delim('{') {
				kt, err := dec.Token()
				key, _ := kt.(string)
				if err != nil {
					return "", false
				}
				p, within = join(path, key), typeWithin(t, reflect.Struct, foldKey(key))
				if within == nil && t != nil && t.Kind() == reflect.Struct {
					return p, true
				}
			}
			if p, ok := walk(p, depth+1, within); ok {
				return p, true
			}
		}
		dec.Token() // the closing delimiter
		return "", false
	}
	return walk("", 0, reflect.TypeFor[Document]())
}

// describeType says what a Go field type accepts, in JSON terms.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint64:
		return "a non-negative integer"
	case reflect.Uint32:
		return "an integer in [0, 4294967295]"
	case reflect.Int64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	case reflect.Bool:
		return "true or false"
	}
	return t.String()
}

// ErrDuplicateKey is what the error of a document that names a key twice
// Is (besides ErrInvalid): callers that answer duplicates differently from
// other field errors (the admin API answers 400 duplicate-field) test for
// it. errors.As still finds its *FieldError.
var ErrDuplicateKey = errors.New("policy: duplicate key")

type duplicateKeyError struct{ *FieldError }

func (e duplicateKeyError) Unwrap() []error { return []error{e.FieldError, ErrDuplicateKey} }

// checkDuplicateKeys walks doc's tokens and refuses an object that names a
// key twice, and a null where the document cannot hold one (a null left a
// field at its default silently; only an optional part, such as
// routes.default, takes null, as its absence). Keys are compared the way
// encoding/json matches them to fields, case-insensitively:
// {"mode":"strict","MODE":"elastic"} names mode twice, and the decoder
// would keep the last. Syntax errors are left for the decoder, which names
// them better.
func checkDuplicateKeys(doc []byte) error {
	err := walkValue(json.NewDecoder(bytes.NewReader(doc)), "", 0, reflect.TypeFor[Document]())
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

// errStopWalk ends the walk early at a syntax error.
var errStopWalk = errors.New("stop")

// maxWalkDepth bounds the walk. No field of a valid document is deeper than
// 4 (routes.rules[0].op), so a value below this depth is refused by the
// decoder as a wrong type whatever its keys: the walk skips it without
// looking (and goes on with its siblings), which keeps it linear on
// adversarial nesting (paths grow with depth).
const maxWalkDepth = 8

// walkValue reads one value that decodes into t (nil: a field the decoder
// refuses as unknown, so anything goes here).
func walkValue(dec *json.Decoder, path string, depth int, t reflect.Type) error {
	tok, err := dec.Token()
	if err != nil {
		return errStopWalk
	}
	switch tok {
	case nil:
		if t != nil && t.Kind() != reflect.Pointer {
			return fieldErr(path, "must not be null (leave the field out for its default)")
		}
		return nil
	case json.Delim('{'), json.Delim('['):
		if depth >= maxWalkDepth {
			return skipNested(dec)
		}
	default:
		return nil
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if tok == json.Delim('[') {
		elem := typeWithin(t, reflect.Slice, "")
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, path+"["+strconv.Itoa(i)+"]", depth+1, elem); err != nil {
				return err
			}
		}
	} else {
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return errStopWalk
			}
			key, _ := kt.(string) // the decoder only yields string keys
			p := join(path, key)
			folded := foldKey(key)
			if seen[folded] {
				return duplicateKeyError{&FieldError{Field: p, Problem: "duplicate key"}}
			}
			seen[folded] = true
			if err := walkValue(dec, p, depth+1, typeWithin(t, reflect.Struct, folded)); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return errStopWalk
	}
	return nil
}

// typeWithin is the type of what t holds: a slice's element, a map's
// value, or the struct field whose JSON name folds to key; nil when t
// holds no such thing (the decoder refuses it).
func typeWithin(t reflect.Type, container reflect.Kind, key string) reflect.Type {
	switch {
	case t == nil:
		return nil
	case container == reflect.Slice && t.Kind() == reflect.Slice:
		return t.Elem()
	case container == reflect.Struct && t.Kind() == reflect.Map:
		return t.Elem()
	case container == reflect.Struct && t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if f.IsExported() && name != "-" && foldKey(name) == key {
				return f.Type
			}
		}
	}
	return nil
}

// skipNested consumes the rest of an array or object whose opening
// delimiter was just read.
func skipNested(dec *json.Decoder) error {
	for open := 1; open > 0; {
		tok, err := dec.Token()
		if err != nil {
			return errStopWalk
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			open++
		case json.Delim('}'), json.Delim(']'):
			open--
		}
	}
	return nil
}

// foldKey maps the keys encoding/json would match to one field to one
// string: ASCII case-insensitively, and other letters by their simple case
// mappings.
func foldKey(k string) string {
	return strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				return r - 'a' + 'A'
			}
			return r
		}
		return unicode.ToUpper(unicode.ToLower(r))
	}, k)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
