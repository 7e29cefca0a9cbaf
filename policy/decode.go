package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// decodeError turns encoding/json's errors into ErrMalformed or a
// *FieldError that names the field.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fieldErr(te.Field, "must be %s, not %s", describeType(te.Type), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		return fieldErr(name, "unknown field")
	}
	return fmt.Errorf("%w: %w", ErrMalformed, err)
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

// checkDuplicateKeys walks doc's tokens and refuses an object that names a
// key twice. Syntax errors are left for the decoder, which names them better.
func checkDuplicateKeys(doc []byte) error {
	err := walkValue(json.NewDecoder(bytes.NewReader(doc)), "", 0)
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

// errStopWalk ends the duplicate-key walk early: at a syntax error, or
// below maxWalkDepth.
var errStopWalk = errors.New("stop")

// maxWalkDepth bounds the walk. No field of a valid document is deeper than
// 3 (operations.name.weight), so anything below this depth is refused by the
// decoder as a wrong type whatever its keys; stopping here also keeps the
// walk linear on adversarial nesting (paths grow with depth).
const maxWalkDepth = 8

func walkValue(dec *json.Decoder, path string, depth int) error {
	if depth > maxWalkDepth {
		return errStopWalk
	}
	tok, err := dec.Token()
	if err != nil {
		return errStopWalk
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return errStopWalk
			}
			key, _ := kt.(string) // the decoder only yields string keys
			p := join(path, key)
			if seen[key] {
				return fieldErr(p, "duplicate key")
			}
			seen[key] = true
			if err := walkValue(dec, p, depth+1); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return errStopWalk
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
