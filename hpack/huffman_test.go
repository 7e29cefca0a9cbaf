package hpack

import (
	"math/rand/v2"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

// TestHuffmanReference checks huffmanDecode against the reference, on
// encoded random strings and on random octets (mostly invalid codes).
func TestHuffmanReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(code []byte) {
		want, xerr := xhpack.HuffmanDecodeToString(code)
		n, ok := huffmanDecode(nil, nil, code)
		if ok != (xerr == nil) {
			t.Fatalf("%x: ok %v, reference %v", code, ok, xerr)
		}
		if !ok {
			return
		}
		if n != len(want) {
			t.Fatalf("%x: length %d, reference %d", code, n, len(want))
		}
		// Split the output anywhere between the two pieces.
		buf := make([]byte, n)
		k := r.IntN(n + 1)
		if m, ok := huffmanDecode(buf[:k], buf[k:], code); !ok || m != n || string(buf) != want {
			t.Fatalf("%x: %q, reference %q", code, buf, want)
		}
	}
	for range 20000 {
		s := make([]byte, r.IntN(40))
		for i := range s {
			if r.IntN(4) == 0 {
				s[i] = byte(r.IntN(256))
			} else {
				s[i] = byte('a' + r.IntN(26))
			}
		}
		code := xhpack.AppendHuffmanString(nil, string(s))
		check(code)
		if len(code) > 0 {
			code[r.IntN(len(code))] ^= 1 << r.IntN(8)
			check(code)
		}
		raw := make([]byte, r.IntN(8))
		for i := range raw {
			raw[i] = byte(r.IntN(256))
			if r.IntN(2) == 0 {
				raw[i] = 0xff
			}
		}
		check(raw)
	}
	// Every octet alone.
	for c := range 256 {
		check(xhpack.AppendHuffmanString(nil, string([]byte{byte(c)})))
	}
}

func TestHuffmanTables(t *testing.T) {
	// Accepting states: the root and the all-ones paths of 1 to 7 bits.
	accepting := 0
	for _, ok := range huffmanAccepts {
		if ok {
			accepting++
		}
	}
	if accepting != 8 || !huffmanAccepts[0] {
		t.Fatalf("%d accepting states", accepting)
	}
	// Output that fits in neither piece is counted, not written.
	code := xhpack.AppendHuffmanString(nil, "hello")
	buf := make([]byte, 2)
	if n, ok := huffmanDecode(buf[:1], buf[1:], code); !ok || n != 5 || string(buf) != "he" {
		t.Fatalf("%d %v %q", n, ok, buf)
	}
}

func BenchmarkHuffmanDecode(b *testing.B) {
	code := xhpack.AppendHuffmanString(nil, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	buf := make([]byte, 64)
	b.SetBytes(int64(len(code)))
	for b.Loop() {
		huffmanDecode(buf, nil, code)
	}
}
