package hpack

// text is a header field name or value as found, not yet copied: plain
// octets, in at most two pieces (a dynamic table entry may wrap around the
// end of the ring), or a Huffman code that has been validated and measured.
type text struct {
	a, b []byte // the plain octets, in order; for a Huffman code, a only
	huff bool   // a is a Huffman code
	n    int    // the decoded length
}

// plainText makes a text of the octets p.
func plainText(p []byte) text {
	return text{a: p, n: len(p)}
}

// readString decodes a string literal (§5.2) from the start of p: it
// sets t to the text, which refers to p, and returns the rest of p, or
// false if the literal overruns p or is a malformed Huffman code.
func readString(p []byte, t *text) (rest []byte, ok bool) {
	if len(p) == 0 {
		return nil, false
	}
	huff := p[0]&0x80 != 0
	n, p, ok := readInt(p, 7)
	if !ok || n > uint64(len(p)) {
		return nil, false
	}
	raw, rest := p[:n], p[n:]
	if !huff {
		*t = plainText(raw)
		return rest, true
	}
	decoded, ok := huffmanDecode(nil, nil, raw)
	if !ok {
		return nil, false
	}
	*t = text{a: raw, huff: true, n: decoded}
	return rest, true
}

// writeTo writes the decoded octets of t to x and then y, whose lengths add
// up to t.n. Plain octets are copied in order, piece by piece, so that t
// may lie in the same ring as x and y, ahead of them in ring order (see
// table.insert).
func (t *text) writeTo(x, y []byte) {
	assert(len(x)+len(y) == t.n)
	if t.huff {
		n, ok := huffmanDecode(x, y, t.a)
		assert(ok && n == t.n) // readString validated and measured the code
		return
	}
	src, next := t.a, t.b
	for len(src)+len(next) > 0 {
		if len(src) == 0 {
			src, next = next, nil
		}
		if len(x) == 0 {
			x, y = y, nil
		}
		k := copy(x, src)
		x, src = x[k:], src[k:]
	}
}
