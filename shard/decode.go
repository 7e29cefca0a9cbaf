package shard

import (
	"strconv"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/tollgated/tollgated/decimal"
)

// Request decoding.
//
// Anything on the network can send the data plane bytes, so every decoder
// here reads a body as one JSON object of known fields and checks each
// field before it uses it:
//
//   - a key the route does not define is refused (unknown-field), and so is
//     a key named twice (duplicate-field): fastjson keeps both, and which
//     one a reader would take is a question with no safe answer. With both
//     refused, every object in an accepted body is one the route reads;
//   - a field the route needs must be present, and null is a value of the
//     wrong type, never "absent";
//   - a string is valid UTF-8 without control characters, within its
//     length bound;
//   - an integer is plain JSON digits — no sign, fraction, exponent or
//     leading zero — from its minimum to at most 2^63−1, the range every
//     ledger backend stores. NaN, 1e3, 2.0, -1 and a 400-digit number are
//     refused, not rounded or wrapped.
//
// A refusal is 400 problem+json naming the field as a path
// ("workload[2].count"). The path is built in the shard's scratch buffer,
// so a refusal allocates no more than an admission does.

// problemKind is why a request was refused before it reached the engine.
type problemKind uint8

const (
	noProblem problemKind = iota
	problemInvalidBody
	problemDuplicateField
	problemUnknownField
	problemInvalidQuery
	problemBodyTooLarge
	problemInternal
)

var problemKinds = [...]struct {
	status      int
	code, title string
}{
	problemInvalidBody:    {400, "invalid-body", "Invalid request body"},
	problemDuplicateField: {400, "duplicate-field", "Duplicate field"},
	problemUnknownField:   {400, "unknown-field", "Unknown field"},
	problemInvalidQuery:   {400, "invalid-query", "Invalid query"},
	problemBodyTooLarge:   {413, "body-too-large", "Request body too large"},
	problemInternal:       {500, "internal", "Internal error"},
}

// fieldProblem is a refusal at decoding: its kind and what the field must
// be. The field's path is in Shard.field.
type fieldProblem struct {
	kind   problemKind
	detail string
}

func (p fieldProblem) refused() bool { return p.kind != noProblem }

func invalid(detail string) fieldProblem { return fieldProblem{problemInvalidBody, detail} }

// Limits of what a decoder accepts.
const (
	// maxInt is the largest integer a field may hold: 2^63−1.
	maxInt = 1<<63 - 1
	// maxNameLen bounds permission and operation names, as
	// policy.MaxNameLen does where they are defined.
	maxNameLen = 64
	// maxEchoedKey bounds how much of an unknown or repeated key a
	// refusal repeats back.
	maxEchoedKey = 64
	// maxAdmitBody bounds a /v1/check or /v1/admit body: 64 lines of the
	// longest names and counts fit in well under half of it. The bound
	// also bounds what one request can make the shard's parser keep.
	maxAdmitBody = 16 << 10
	// maxReservationBody bounds a commit, finish or cancel body, whose
	// longest valid form is under 100 bytes.
	maxReservationBody = 4 << 10
)

const (
	detailObject      = "the body must be one JSON object"
	detailTooLarge    = "the body is larger than this route accepts"
	detailUnknown     = "is not a field of this object"
	detailDuplicate   = "is named more than once"
	detailLineObject  = "must be an object"
	detailPermission  = "must be a string of 1 to 64 bytes"
	detailWorkload    = "must be an array of 1 to 64 lines"
	detailOp          = "must be a string of 1 to 64 bytes"
	detailCount       = "must be an integer from 0 to 9223372036854775807"
	detailTTL         = "must be an integer from 1 to 86400000 (milliseconds)"
	detailReservation = "must be the 36 lowercase hex digits /v1/admit or /v1/authz returned"
	detailUnits       = "must be an integer from 0 to 9223372036854775807"
)

// Field paths. A decoder says where it is reading (atTop, atElement);
// the refused field's path is written only when a field is refused, so
// decoding a good body writes none.

// fieldAt is where a decoder reads: the top level (array ""), or element
// index of array.
type fieldAt struct {
	array string
	index int
}

func (s *Shard) atTop() {
	s.at = fieldAt{}
	s.field = s.field[:0]
}

func (s *Shard) atElement(array string, i int) { s.at = fieldAt{array, i} }

// refuseField writes the path of field name at the current place ("" for
// the array element itself).
func (s *Shard) refuseField(name string) { s.field = append(s.place(name != ""), name...) }

// refuseKey writes the path of a key the client sent, cut to maxEchoedKey
// bytes. Escaping it for the answer is writeFieldProblem's job.
func (s *Shard) refuseKey(key []byte) {
	s.field = append(s.place(true), key[:min(len(key), maxEchoedKey)]...)
}

// place starts the path at the current place: "" at the top level,
// "array[i]" (and a "." before a member) in an element.
func (s *Shard) place(member bool) []byte {
	b := s.field[:0]
	if s.at.array == "" {
		return b
	}
	b = append(b, s.at.array...)
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(s.at.index), 10)
	b = append(b, ']')
	if member {
		b = append(b, '.')
	}
	return b
}

// Objects and values.

// object parses body as one JSON object, refusing it if it is longer
// than limit. The values live in s.parser until its next parse.
func (s *Shard) object(body []byte, limit int) (*fastjson.Object, fieldProblem) {
	s.atTop()
	if len(body) > limit {
		return nil, fieldProblem{problemBodyTooLarge, detailTooLarge}
	}
	v, err := s.parser.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return nil, invalid(detailObject)
	}
	o, _ := v.Object()
	return o, fieldProblem{}
}

// fields matches o's keys with names, storing each value at its name's
// index in vals (which must be all nil and as long as names). A key not
// in names, or one already seen, is refused, naming it under the current
// place. Keys are compared unescaped: "\u0061" and "a" are one key.
func (s *Shard) fields(o *fastjson.Object, names []string, vals []*fastjson.Value) fieldProblem {
	// Usually every key is a known name, once, as sent: looking the names
	// up (fastjson compares keys as sent while no name is missing) finds
	// as many as there are keys, and there is nothing else to see. Found
	// counts distinct names, so any unknown or repeated key leaves it
	// short of the key count.
	found, n := 0, o.Len()
	for i, name := range names {
		if found == n {
			break
		}
		if vals[i] = o.Get(name); vals[i] != nil {
			found++
		}
	}
	if found == n {
		return fieldProblem{}
	}
	// Find the first key at fault, in the order sent.
	clear(vals)
	var bad []byte
	kind := noProblem
	o.Visit(func(key []byte, v *fastjson.Value) {
		if kind != noProblem {
			return
		}
		i := 0
		for i < len(names) && string(key) != names[i] {
			i++
		}
		switch {
		case i == len(names):
			kind, bad = problemUnknownField, key
		case vals[i] != nil:
			kind, bad = problemDuplicateField, key
		default:
			vals[i] = v
		}
	})
	switch kind {
	case problemUnknownField:
		s.refuseKey(bad)
		return fieldProblem{kind, detailUnknown}
	case problemDuplicateField:
		s.refuseKey(bad)
		return fieldProblem{kind, detailDuplicate}
	}
	return fieldProblem{}
}

// text returns field name's string value, if it is one of 1 to maxLen
// bytes of UTF-8 without control characters; otherwise the refusal, with
// the path pointing at it. A nil v (absent) is refused too.
func (s *Shard) text(v *fastjson.Value, name string, maxLen int, detail string) ([]byte, fieldProblem) {
	b, p := s.str(v, name, maxLen, detail)
	if p.refused() || plainText(b, maxLen) {
		return b, p
	}
	s.refuseField(name)
	return nil, invalid(detail)
}

// str is text without the look at the bytes, for a name the caller looks
// up in a policy: every name a policy defines is plain ASCII
// ([a-z0-9_.-]), so a name found is plain text already, and only one not
// found needs plainName.
func (s *Shard) str(v *fastjson.Value, name string, maxLen int, detail string) ([]byte, fieldProblem) {
	if v != nil && v.Type() == fastjson.TypeString {
		if b, _ := v.StringBytes(); len(b) > 0 && len(b) <= maxLen {
			return b, fieldProblem{}
		}
	}
	s.refuseField(name)
	return nil, invalid(detail)
}

// plainName refuses a name str returned that no policy found, unless it
// is plain text.
func (s *Shard) plainName(b []byte, name, detail string) fieldProblem {
	if plainText(b, maxNameLen) {
		return fieldProblem{}
	}
	s.refuseField(name)
	return invalid(detail)
}

// integer returns field name's value, if it is a plain JSON integer from
// lo to hi (hi ≤ maxInt); otherwise the refusal. A nil v is refused too.
func (s *Shard) integer(v *fastjson.Value, name string, lo, hi uint64, detail string) (uint64, fieldProblem) {
	if v != nil && v.Type() == fastjson.TypeNumber {
		// MarshalTo hands back a number's text as it was sent, into
		// scratch that stays with the shard: no allocation.
		s.num = v.MarshalTo(s.num[:0])
		if n, ok := plainUint(s.num); ok && n >= lo && n <= hi {
			return n, fieldProblem{}
		}
	}
	s.refuseField(name)
	return 0, invalid(detail)
}

// array returns field name's elements, if it is an array of lo to hi of
// them; otherwise the refusal. A nil v is refused too.
func (s *Shard) array(v *fastjson.Value, name string, lo, hi int, detail string) ([]*fastjson.Value, fieldProblem) {
	if v != nil && v.Type() == fastjson.TypeArray {
		a, _ := v.Array()
		if len(a) >= lo && len(a) <= hi {
			return a, fieldProblem{}
		}
	}
	s.refuseField(name)
	return nil, invalid(detail)
}

// plainUint parses JSON digits with no sign, fraction, exponent or
// leading zero, up to maxInt. fastjson's own number reading accepts more
// (leading zeros, NaN, Inf) and allocates to refuse.
func plainUint(b []byte) (uint64, bool) {
	if len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	// The 20-digit numbers above maxInt are refused by decimal's length.
	n, ok := decimal.Uint(b)
	return n, ok && n <= maxInt
}

// plainText reports whether b is 1 to maxLen bytes of valid UTF-8 with no
// control character (C0, DEL). Names are ASCII: one table lookup a byte,
// and utf8.Valid only for text that is not.
func plainText(b []byte, maxLen int) bool {
	if len(b) == 0 || len(b) > maxLen {
		return false
	}
	var kinds byte
	for _, c := range b {
		kinds |= byteKind[c]
	}
	return kinds&kindControl == 0 && (kinds&kindHigh == 0 || utf8.Valid(b))
}

const (
	kindControl = 1 << iota // C0 or DEL
	kindHigh                // not ASCII
)

var byteKind = func() (t [256]byte) {
	for c := range t {
		switch {
		case c < 0x20 || c == 0x7f:
			t[c] = kindControl
		case c >= utf8.RuneSelf:
			t[c] = kindHigh
		}
	}
	return t
}()

// appendEscaped appends b as the inside of a JSON string: quotes,
// backslashes and control characters escaped, and every byte that is not
// UTF-8 replaced by U+FFFD, so an echoed key is always valid JSON.
func appendEscaped(dst, b []byte) []byte {
	const hexDigits = "0123456789abcdef"
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1:
			dst = append(dst, `\ufffd`...)
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r < 0x20 || r == 0x7f:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
		default:
			dst = append(dst, b[:n]...)
		}
		b = b[n:]
	}
	return dst
}
