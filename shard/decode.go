package shard

import (
	"strconv"
	"unicode/utf8"

	"github.com/valyala/fastjson"
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
	detailReservation = "must be the 20 lowercase hex digits /v1/admit returned"
	detailUnits       = "must be an integer from 0 to 9223372036854775807"
)

// Field paths.

// path starts the field path over at name.
func (s *Shard) path(name string) { s.field = append(s.field[:0], name...) }

// pathIndex starts the field path over at name[i].
func (s *Shard) pathIndex(name string, i int) {
	s.field = append(s.field[:0], name...)
	s.field = append(s.field, '[')
	s.field = strconv.AppendInt(s.field, int64(i), 10)
	s.field = append(s.field, ']')
}

// member appends name to the field path: ".name", or name at the top.
func (s *Shard) member(name string) {
	if len(s.field) > 0 {
		s.field = append(s.field, '.')
	}
	s.field = append(s.field, name...)
}

// memberKey appends a key the client sent, cut to maxEchoedKey bytes.
// Escaping it for the answer is writeFieldProblem's job.
func (s *Shard) memberKey(key []byte) {
	if len(s.field) > 0 {
		s.field = append(s.field, '.')
	}
	s.field = append(s.field, key[:min(len(key), maxEchoedKey)]...)
}

// Objects and values.

// object parses body as one JSON object, refusing it if it is longer
// than limit. The values live in s.parser until its next parse.
func (s *Shard) object(body []byte, limit int) (*fastjson.Object, fieldProblem) {
	s.field = s.field[:0]
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
// path. The keys are compared unescaped: "\u0061" and "a" are one key.
func (s *Shard) fields(o *fastjson.Object, names []string, vals []*fastjson.Value) fieldProblem {
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
	if kind == noProblem {
		return fieldProblem{}
	}
	s.memberKey(bad)
	if kind == problemUnknownField {
		return fieldProblem{kind, detailUnknown}
	}
	return fieldProblem{kind, detailDuplicate}
}

// text returns field name's string value, if it is one of 1 to maxLen
// bytes of UTF-8 without control characters; otherwise the refusal, with
// the path pointing at it. A nil v (absent) is refused too.
func (s *Shard) text(v *fastjson.Value, name string, maxLen int, detail string) ([]byte, fieldProblem) {
	if v != nil && v.Type() == fastjson.TypeString {
		b, _ := v.StringBytes()
		if plainText(b, maxLen) {
			return b, fieldProblem{}
		}
	}
	s.member(name)
	return nil, invalid(detail)
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
	s.member(name)
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
	s.member(name)
	return nil, invalid(detail)
}

// plainUint parses JSON digits with no sign, fraction, exponent or
// leading zero, up to maxInt. fastjson's own number reading accepts more
// (leading zeros, NaN, Inf) and allocates to refuse.
func plainUint(b []byte) (uint64, bool) {
	// 19 digits cannot overflow a uint64; the 20-digit ones above maxInt
	// are refused by length.
	if len(b) == 0 || len(b) > 19 || b[0] == '0' && len(b) > 1 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n <= maxInt
}

// plainText reports whether b is 1 to maxLen bytes of valid UTF-8 with no
// control character (C0, DEL).
func plainText(b []byte, maxLen int) bool {
	if len(b) == 0 || len(b) > maxLen || !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

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
