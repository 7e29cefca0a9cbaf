package hpack

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

// An input of FuzzDecode is a sequence of header blocks on one connection:
// a first octet selecting the table size limit from fuzzLimits, then blocks,
// each after a two-octet big-endian length (cut short at the end of the
// input).
var fuzzLimits = [...]uint32{4096, 256, 0, 32, 64, 100, 1000, MaxTableBytes}

const (
	fuzzListBytes  = 1 << 20 // the bound of the Fields that holds whole lists
	fuzzSmallBytes = 300     // the bound of the Fields that often overflows
)

// fuzzInput encodes blocks as an input of FuzzDecode.
func fuzzInput(limit uint32, blocks ...[]byte) []byte {
	selector := -1
	for i, l := range fuzzLimits {
		if l == limit {
			selector = i
		}
	}
	if selector < 0 {
		panic("no such limit")
	}
	in := []byte{byte(selector)}
	for _, b := range blocks {
		in = binary.BigEndian.AppendUint16(in, uint16(len(b)))
		in = append(in, b...)
	}
	return in
}

// fuzzSeeds returns the seed corpus: the Appendix C examples, blocks made
// by the reference encoder, and malformed blocks.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	series := func(limit uint32, steps []step) {
		var blocks [][]byte
		for _, s := range steps {
			blocks = append(blocks, dehex(s.block))
		}
		seeds = append(seeds, fuzzInput(limit, blocks...))
	}
	series(4096, appendixC3)
	series(4096, appendixC4)
	series(256, appendixC5)
	series(256, appendixC6)
	for _, b := range []string{
		"400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
		"040c 2f73 616d 706c 652f 7061 7468",
		"1008 7061 7373 776f 7264 0673 6563 7265 74",
		"82",
		"80", "be", "ff 8080 8080 8080 8080 8000", "0005 6162", "3fe21f", "82 20",
		"20 20 20", "0082 1fff 00", "0081 18 00", "0084 ffff ffff 00",
		"4001610162 3f09 3f45 be",
	} {
		seeds = append(seeds, fuzzInput(4096, dehex(b)))
	}
	first, later := grpcBlocks(t)
	seeds = append(seeds, fuzzInput(4096, first, later, later))

	// Reference-encoded sequences with table size changes and evictions.
	for i, limit := range fuzzLimits {
		r := rand.New(rand.NewPCG(uint64(i), 2))
		g := newHeaderGen(r)
		var enc bytes.Buffer
		e := xhpack.NewEncoder(&enc)
		e.SetMaxDynamicTableSizeLimit(limit)
		var blocks [][]byte
		for range 6 {
			if r.IntN(3) == 0 {
				e.SetMaxDynamicTableSize(uint32(r.IntN(int(limit) + 1)))
				e.SetMaxDynamicTableSize(uint32(r.IntN(int(limit) + 1)))
			}
			enc.Reset()
			list := g.list()
			for _, h := range list[:min(len(list), r.IntN(6))] {
				e.WriteField(h)
			}
			blocks = append(blocks, bytes.Clone(enc.Bytes()))
		}
		seeds = append(seeds, fuzzInput(limit, blocks...))
	}
	return seeds
}

// fuzzState is reused across inputs (a fuzz worker calls the target
// sequentially), so that Reset is exercised and memory stays bounded.
type fuzzState struct {
	decoders, small [len(fuzzLimits)]*Decoder
	f, fSmall       *Fields
}

func (s *fuzzState) get(i int) (d, small *Decoder) {
	if s.decoders[i] == nil {
		s.decoders[i] = NewDecoder(fuzzLimits[i])
		s.small[i] = NewDecoder(fuzzLimits[i])
	}
	s.decoders[i].Reset()
	s.small[i].Reset()
	return s.decoders[i], s.small[i]
}

// FuzzDecode decodes sequences of blocks with Decode and with the reference
// decoder (same table size limit, no string length limit), and checks that
// they agree block after block: the same fields in order when both accept,
// ErrTooLarge exactly when the list exceeds the bound, with the fields that
// fit. One difference is intended, and checked to be the reason whenever
// the decoders disagree: the reference accepts a size update after a field
// (or a third one) while its table is empty, which RFC 7541 §4.2 forbids,
// and Decode rejects. (The reference also rejects a second size update at
// the start of a block if its table is not empty after the first; the RFC
// allows it, and referenceDecode works around it.)
func FuzzDecode(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	s := &fuzzState{f: NewFields(fuzzListBytes), fSmall: NewFields(fuzzSmallBytes)}
	arena, index := &s.f.arena[0], &s.f.index[0]
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		selector := int(data[0]) % len(fuzzLimits)
		d, small := s.get(selector)
		x := xhpack.NewDecoder(fuzzLimits[selector], nil)
		for rest, i := data[1:], 0; len(rest) > 0; i++ {
			var block []byte
			block, rest = nextBlock(rest)
			want, xerr := referenceDecode(x, block)
			err := d.Decode(block, s.f)
			errSmall := small.Decode(block, s.fSmall)
			if (err == ErrCompression) != (errSmall == ErrCompression) {
				t.Fatalf("block %d %x: %v with a large bound, %v with a small one", i, block, err, errSmall)
			}
			if !agree(t, i, block, want, xerr, s.f, err, fuzzListBytes) ||
				!agree(t, i, block, want, xerr, s.fSmall, errSmall, fuzzSmallBytes) {
				return
			}
			if err := checkInvariants(d); err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
			if err := checkInvariants(small); err != nil {
				t.Fatalf("block %d: %v", i, err)
			}
		}
		if &s.f.arena[0] != arena || &s.f.index[0] != index || len(s.f.arena) != fuzzListBytes {
			t.Fatal("Fields storage changed")
		}
	})
}

// nextBlock splits the next block off a FuzzDecode input.
func nextBlock(in []byte) (block, rest []byte) {
	if len(in) < 2 {
		return in, nil
	}
	n := min(int(binary.BigEndian.Uint16(in)), len(in)-2)
	return in[2 : 2+n], in[2+n:]
}

// agree checks the result of Decode against the reference's for one block,
// and reports whether the connection goes on.
func agree(t *testing.T, i int, block []byte, want []pair, xerr error, f *Fields, err error, bound int) bool {
	t.Helper()
	switch {
	case xerr == nil && err != ErrCompression:
		if e := checkBounded(f, err, want, bound); e != nil {
			t.Fatalf("block %d %x: %v", i, block, e)
		}
		return true
	case xerr == nil:
		if !misplacedSizeUpdate(block) {
			t.Fatalf("block %d %x: rejected, reference accepts %v", i, block, want)
		}
		return false
	case err != ErrCompression:
		t.Fatalf("block %d %x: accepted (%v), reference rejects: %v", i, block, err, xerr)
	}
	return false
}

// TestFuzzSeeds runs the seed corpus through the checks of FuzzDecode with
// a plain go test, and checks that the seeds exercise what they should.
func TestFuzzSeeds(t *testing.T) {
	seeds := fuzzSeeds(t)
	if len(seeds) < 20 {
		t.Fatalf("%d seeds", len(seeds))
	}
	for _, in := range seeds {
		if in[0] >= byte(len(fuzzLimits)) {
			t.Fatalf("selector %d", in[0])
		}
	}
}
