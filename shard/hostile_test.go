package shard

import (
	"strings"

	"github.com/tollgated/tollgated/control/message"
)

// Hostile variants of valid request bodies: every field missing in turn,
// null, of every wrong type, out of range, over-long, not UTF-8, named
// twice, plus unknown fields and broken bodies. The decode tests check the
// answer to each; the fuzz targets start from them.

// A body model, rendered to JSON text. Leaves are raw JSON text, so a
// variant can hold what no encoder writes (NaN, a lone 0xff byte).
type (
	rawJSON string
	member  struct {
		key string
		val any // rawJSON, object or array
	}
	object []member
	array  []any
)

func render(v any) string {
	var b strings.Builder
	renderTo(&b, v)
	return b.String()
}

func renderTo(b *strings.Builder, v any) {
	switch v := v.(type) {
	case rawJSON:
		b.WriteString(string(v))
	case object:
		b.WriteByte('{')
		for i, m := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + m.key + `":`)
			renderTo(b, m.val)
		}
		b.WriteByte('}')
	case array:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			renderTo(b, e)
		}
		b.WriteByte(']')
	}
}

// variant is one hostile body and what its refusal must say: code and
// field ("" when the body as a whole is refused). valid marks a body that
// must not be refused at decoding (an optional field left out).
type variant struct {
	name, body  string
	code, field string
	valid       bool
}

// Values wrong for every integer field, and for every string field.
var (
	badIntegers = []string{`null`, `true`, `[]`, `{}`, `"1"`, `"NaN"`, `NaN`, `-Inf`,
		`-1`, `-0`, `01`, `1.5`, `2.0`, `1e3`, `9223372036854775808`, `18446744073709551615`,
		`18446744073709551616`, strings.Repeat("9", 400)}
	// notJSON are values no JSON parser takes: the body as a whole is
	// refused, naming no field.
	notJSON  = []string{`Infinity`, `0x10`, `'1'`, `1 2`, `{"a"}`}
	badTexts = []string{`null`, `true`, `[]`, `{}`, `1`, `""`, `"` + strings.Repeat("a", 300) + `"`,
		"\"\xff\"", "\"a\xc3\"", `"a\u0000"`, `"a\u0001b"`, "\"a\x7f\""}
)

// hostileVariants derives the variants of tmpl. optional lists the field
// paths that may be left out; arrays lists, per array field path, the most
// elements it may hold and the least.
func hostileVariants(tmpl object, optional map[string]bool, arrays map[string][2]int) []variant {
	var out []variant
	add := func(name string, body object, code, field string) {
		out = append(out, variant{name: name, body: render(body), code: code, field: field})
	}
	// Every object: a field missing, named twice, of every wrong value;
	// an unknown field added.
	var walk func(path string, o object, rebuild func(object) object)
	walk = func(path string, o object, rebuild func(object) object) {
		at := func(key string) string {
			if path == "" {
				return key
			}
			return path + "." + key
		}
		with := func(members ...member) object { return rebuild(object(members)) }
		add(at("x")+" unknown", with(append(clone(o), member{"x", rawJSON("1")})...), "unknown-field", at("x"))
		for i, m := range o {
			p := at(m.key)
			without := append(clone(o[:i]), o[i+1:]...)
			if optional[p] {
				out = append(out, variant{name: p + " missing", body: render(with(without...)), valid: true})
			} else {
				add(p+" missing", with(without...), "invalid-body", p)
			}
			twice := append(clone(o[:i+1]), o[i:]...)
			add(p+" twice", with(twice...), "duplicate-field", p)
			set := func(v any) object {
				c := clone(o)
				c[i].val = v
				return with(c...)
			}
			switch v := m.val.(type) {
			case rawJSON:
				bad := badTexts
				if !strings.HasPrefix(string(v), `"`) {
					bad = badIntegers
				}
				for _, b := range bad {
					add(p+" = "+b, set(rawJSON(b)), "invalid-body", p)
				}
				for _, b := range notJSON {
					add(p+" = "+b, set(rawJSON(b)), "invalid-body", "")
				}
			case array:
				for _, b := range []string{`null`, `{}`, `"x"`, `1`, `true`} {
					add(p+" = "+b, set(rawJSON(b)), "invalid-body", p)
				}
				lim := arrays[p]
				long := make(array, lim[1]+1)
				for j := range long {
					long[j] = v[0]
				}
				add(p+" too long", set(long), "invalid-body", p)
				if lim[0] > 0 {
					add(p+" empty", set(array{}), "invalid-body", p)
				}
				for _, b := range []string{`null`, `1`, `"x"`, `[]`} {
					c := append(array{rawJSON(b)}, v[1:]...)
					add(p+"[0] = "+b, set(c), "invalid-body", p+"[0]")
				}
				for j, e := range v {
					eo, ok := e.(object)
					if !ok {
						continue
					}
					ep := p + "[" + itoa(j) + "]"
					walk(ep, eo, func(n object) object {
						c := append(array(nil), v...)
						c[j] = n
						return set(c)
					})
				}
			}
		}
	}
	walk("", tmpl, func(o object) object { return o })
	// A key spelled with an escape is the same key.
	first := tmpl[0].key
	esc := `\u00` + hexByte(first[0]) + first[1:]
	add(first+" twice, escaped", append(clone(tmpl), member{esc, tmpl[0].val}), "duplicate-field", first)
	for _, b := range []string{``, `{`, `[]`, `null`, `"x"`, `1`, `{} {}`, `{}x`, "\xff",
		strings.Repeat("[", 1000) + strings.Repeat("]", 1000), `{"a":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}`} {
		out = append(out, variant{name: "body " + b[:min(len(b), 12)], body: b, code: "invalid-body"})
	}
	return out
}

func clone(o object) object { return append(object(nil), o...) }

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func hexByte(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

// Valid templates per route. "RES" stands for a live reservation id.
var (
	admitTemplate = object{
		{"permission", rawJSON(`"chat"`)},
		{"workload", array{
			object{{"op", rawJSON(`"requests"`)}, {"count", rawJSON(`1`)}},
			object{{"op", rawJSON(`"input_tokens"`)}, {"count", rawJSON(`2`)}},
		}},
		{"ttl_ms", rawJSON(`5000`)},
	}
	commitTemplate = object{{"reservation", rawJSON(`"RES"`)}}
	finishTemplate = object{{"reservation", rawJSON(`"RES"`)}, {"units", rawJSON(`1`)}}
	usageTemplate  = object{{"events", array{
		object{{"id", rawJSON(`"e1"`)}, {"agent_id", rawJSON(`"a1"`)}, {"units", rawJSON(`5`)},
			{"occurred_at", rawJSON(`"2026-12-02T17:00:00Z"`)}},
		object{{"id", rawJSON(`"e2"`)}, {"agent_id", rawJSON(`"a1"`)}, {"units", rawJSON(`7`)},
			{"occurred_at", rawJSON(`"2026-12-02T17:00:01.5+01:00"`)}},
	}}}
)

func admitVariants() []variant {
	return hostileVariants(admitTemplate, map[string]bool{"permission": true, "ttl_ms": true},
		map[string][2]int{"workload": {0, MaxWorkLines}})
}

func reservationVariants(op message.Op) []variant {
	if op == message.OpFinish {
		return hostileVariants(finishTemplate, map[string]bool{"units": true}, nil)
	}
	return hostileVariants(commitTemplate, nil, nil)
}

func usageVariants() []variant {
	return hostileVariants(usageTemplate, nil, map[string][2]int{"events": {1, MaxPostPaidEvents}})
}
