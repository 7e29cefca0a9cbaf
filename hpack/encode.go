package hpack

// Encoding of answers made of constant fields: indexed fields and literals
// without indexing, with plain (not Huffman) strings, so that nothing ever
// enters the peer's dynamic table and the encoder needs no state.

// AppendIndexed appends the indexed field at index (§6.1), which must be
// an index of the static table (1 to 61): the encoder keeps no dynamic table.
func AppendIndexed(dst []byte, index uint64) []byte {
	assert(index >= 1 && index <= uint64(len(staticTable)))
	return appendInt(dst, 0x80, 7, index)
}

// AppendLiteral appends a literal field without indexing with a new name
// (§6.2.2).
func AppendLiteral(dst []byte, name, value string) []byte {
	dst = append(dst, 0x00)
	dst = appendString(dst, name)
	return appendString(dst, value)
}

// AppendLiteralIndexedName appends a literal field without indexing whose
// name is that at index of the static table (§6.2.2).
func AppendLiteralIndexedName(dst []byte, index uint64, value string) []byte {
	assert(index >= 1 && index <= uint64(len(staticTable)))
	dst = appendInt(dst, 0x00, 4, index)
	return appendString(dst, value)
}

// AppendLiteralBytes is AppendLiteral with the value as bytes, so that a
// value built in a buffer needs no conversion.
func AppendLiteralBytes(dst []byte, name string, value []byte) []byte {
	dst = append(dst, 0x00)
	dst = appendString(dst, name)
	dst = appendInt(dst, 0x00, 7, uint64(len(value)))
	return append(dst, value...)
}

// appendString appends s as a plain string literal (§5.2).
func appendString(dst []byte, s string) []byte {
	dst = appendInt(dst, 0x00, 7, uint64(len(s)))
	return append(dst, s...)
}
