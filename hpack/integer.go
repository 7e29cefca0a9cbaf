package hpack

// Integers (§5.1): an N-bit prefix in the first octet, then, if the prefix
// is all 1-bits, continuation octets of 7 bits each, least significant
// first.

// maxContinuations bounds the continuation octets of an integer: nine carry
// 63 bits, so a decoded integer stays below 2^63 + 2^8 and cannot overflow a
// uint64. Longer encodings are a decoding error (§5.1 allows any bound);
// this one also accepts every integer golang.org/x/net/http2/hpack accepts,
// including non-minimal encodings padded with zero continuation octets.
const maxContinuations = 9

// readInt decodes an integer with an n-bit prefix (1 <= n <= 8) from the
// start of p, returning it and the rest of p, or false if p ends first or
// the integer is too long.
func readInt(p []byte, n uint8) (v uint64, rest []byte, ok bool) {
	if len(p) == 0 {
		return 0, nil, false
	}
	mask := uint64(1)<<n - 1
	v = uint64(p[0]) & mask
	if v < mask {
		return v, p[1:], true
	}
	for i := 1; i < len(p) && i <= maxContinuations; i++ {
		c := p[i]
		v += uint64(c&0x7f) << (7 * uint(i-1))
		if c&0x80 == 0 {
			return v, p[i+1:], true
		}
	}
	return 0, nil, false
}

// appendInt appends v with an n-bit prefix (1 <= n <= 8) to dst, the
// first octet's bits above the prefix being those of pattern.
func appendInt(dst []byte, pattern byte, n uint8, v uint64) []byte {
	mask := uint64(1)<<n - 1
	if v < mask {
		return append(dst, pattern|byte(v))
	}
	dst = append(dst, pattern|byte(mask))
	v -= mask
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}
