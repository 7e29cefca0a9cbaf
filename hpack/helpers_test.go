package hpack

import (
	"encoding/hex"
	"fmt"
	"strings"

	xhpack "golang.org/x/net/http2/hpack"
)

// pair is a field as tests compare it.
type pair struct{ name, value string }

func (p pair) String() string { return fmt.Sprintf("%q: %q", p.name, p.value) }

// listOf returns the fields stored in f.
func listOf(f *Fields) []pair {
	list := make([]pair, f.Len())
	for i := range list {
		list[i] = pair{string(f.Name(i)), string(f.Value(i))}
	}
	return list
}

// referenceList converts fields decoded by the reference decoder.
func referenceList(hf []xhpack.HeaderField) []pair {
	list := make([]pair, len(hf))
	for i, h := range hf {
		list[i] = pair{h.Name, h.Value}
	}
	return list
}

// listSize is the size of list as Fields counts it.
func listSize(list []pair) int {
	n := 0
	for _, p := range list {
		n += len(p.name) + len(p.value) + 32
	}
	return n
}

// tableOf returns the entries of the dynamic table, newest first.
func tableOf(d *Decoder) []pair {
	list := make([]pair, d.table.count)
	for i := range list {
		var name, value text
		if !d.table.at(uint64(i+1), &name, &value) {
			panic("missing entry")
		}
		list[i] = pair{textString(&name), textString(&value)}
	}
	return list
}

func textString(t *text) string {
	b := make([]byte, t.n)
	t.writeTo(b, nil)
	return string(b)
}

func equalLists(a, b []pair) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// dehex decodes hex with spaces and newlines in it.
func dehex(s string) []byte {
	s = strings.Join(strings.Fields(s), "")
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// checkInvariants checks the invariants of the dynamic table, and that the
// static table is intact.
func checkInvariants(d *Decoder) error {
	for i, e := range staticTable {
		name, value := &staticTexts[i][0], &staticTexts[i][1]
		if string(name.a) != e.name || string(value.a) != e.value || name.b != nil || value.b != nil ||
			name.huff || value.huff || name.n != len(e.name) || value.n != len(e.value) {
			return fmt.Errorf("static entry %d overwritten", i+1)
		}
	}
	t := &d.table
	size := 0
	octets := 0
	off := t.head
	if t.count > 0 {
		off = int(t.ents[t.first].off)
	}
	for k := range t.count {
		e := t.ents[(t.first+k)%len(t.ents)]
		if int(e.off) != off {
			return fmt.Errorf("entry %d at %d, want %d", k, e.off, off)
		}
		n := int(e.nameLen) + int(e.valueLen)
		size += 32 + n
		octets += n
		off = (off + n) % len(t.octets)
	}
	switch {
	case off != t.head:
		return fmt.Errorf("entries end at %d, head %d", off, t.head)
	case size != t.size:
		return fmt.Errorf("size %d, entries add up to %d", t.size, size)
	case t.size > t.max || t.max > t.limit || t.limit >= len(t.octets):
		return fmt.Errorf("size %d max %d limit %d ring %d", t.size, t.max, t.limit, len(t.octets))
	case t.count >= len(t.ents):
		return fmt.Errorf("count %d of %d", t.count, len(t.ents))
	case octets >= len(t.octets) && t.count > 0:
		return fmt.Errorf("octets %d of %d", octets, len(t.octets))
	}
	return nil
}

// The kinds of field representation, for shape.
const (
	kindIndexed = iota
	kindLiteral
	kindSizeUpdate
)

// rep is a field representation in a block: its kind and where it ends.
type rep struct{ kind, end int }

// shape returns the representations of block, as far as they can be
// delimited. It is independent of the decoder under test, and only used to
// handle the known differences from the reference decoder.
func shape(block []byte) []rep {
	var kinds []rep
	p := block
	varint := func(n uint) (uint64, bool) {
		if len(p) == 0 {
			return 0, false
		}
		mask := uint64(1)<<n - 1
		v := uint64(p[0]) & mask
		p = p[1:]
		if v < mask {
			return v, true
		}
		for shift := uint(0); len(p) > 0 && shift < 63; shift += 7 {
			c := p[0]
			p = p[1:]
			v += uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	skipString := func() bool {
		n, ok := varint(7)
		if !ok || n > uint64(len(p)) {
			return false
		}
		p = p[n:]
		return true
	}
	for len(p) > 0 {
		b := p[0]
		switch {
		case b&0x80 != 0:
			if _, ok := varint(7); !ok {
				return kinds
			}
			kinds = append(kinds, rep{kindIndexed, len(block) - len(p)})
		case b&0xe0 == 0x20:
			if _, ok := varint(5); !ok {
				return kinds
			}
			kinds = append(kinds, rep{kindSizeUpdate, len(block) - len(p)})
		default:
			prefix := uint(4)
			if b&0xc0 == 0x40 {
				prefix = 6
			}
			i, ok := varint(prefix)
			if !ok || (i == 0 && !skipString()) || !skipString() {
				return kinds
			}
			kinds = append(kinds, rep{kindLiteral, len(block) - len(p)})
		}
	}
	return kinds
}

// misplacedSizeUpdate reports whether block has a size update that is not
// among the first two representations, or follows a field.
func misplacedSizeUpdate(block []byte) bool {
	s := shape(block)
	for i, r := range s {
		if r.kind == kindSizeUpdate && (i >= maxSizeUpdates || (i == 1 && s[0].kind != kindSizeUpdate)) {
			return true
		}
	}
	return false
}

// twoSizeUpdates reports whether block begins with two size updates, and
// where the first ends.
func twoSizeUpdates(block []byte) (end int, ok bool) {
	s := shape(block)
	if len(s) >= 2 && s[0].kind == kindSizeUpdate && s[1].kind == kindSizeUpdate {
		return s[0].end, true
	}
	return 0, false
}

// referenceDecode decodes block with the reference decoder x. The
// reference rejects a second size update at the start of a block if the
// first left its table non-empty, which RFC 7541 §4.2 allows; so a block
// that begins with two is given to it as two blocks, the first update
// alone and then the rest, which has the same effect on its table.
func referenceDecode(x *xhpack.Decoder, block []byte) ([]pair, error) {
	if end, ok := twoSizeUpdates(block); ok {
		if _, err := x.DecodeFull(block[:end]); err != nil {
			return nil, err
		}
		block = block[end:]
	}
	hf, err := x.DecodeFull(block)
	return referenceList(hf), err
}

// checkBounded checks the result of decoding a block whose list is want
// into f, of bound max: either all of want, or ErrTooLarge with the longest
// prefix of want within max.
func checkBounded(f *Fields, err error, want []pair, max int) error {
	if f.Size() != listSize(want) {
		return fmt.Errorf("Size %d, want %d", f.Size(), listSize(want))
	}
	if listSize(want) <= max {
		if err != nil || !equalLists(listOf(f), want) {
			return fmt.Errorf("got %v, %v; want %v", err, listOf(f), want)
		}
		return nil
	}
	n, size := 0, 0
	for n < len(want) && size+listSize(want[n:n+1]) <= max {
		size += listSize(want[n : n+1])
		n++
	}
	if err != ErrTooLarge || !equalLists(listOf(f), want[:n]) {
		return fmt.Errorf("got %v, %v; want ErrTooLarge, %v", err, listOf(f), want[:n])
	}
	return nil
}
