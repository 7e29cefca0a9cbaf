package spool

import (
	"bytes"
	"hash/crc32"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 128, MaxPayload} {
		p := fillPayload(make([]byte, n), 42)
		rec := make([]byte, HeaderSize+n)
		encodeRecord(rec, 42, p)
		h := decodeHeader(rec)
		if h.length != uint32(n) || h.seq != 42 || h.recordLen() != len(rec) {
			t.Fatalf("n=%d: header %+v", n, h)
		}
		if !h.valid(rec) {
			t.Fatalf("n=%d: fresh record fails its CRC", n)
		}
		if !bytes.Equal(rec[HeaderSize:], p) {
			t.Fatalf("n=%d: payload changed", n)
		}
	}
}

// The format is documented in doc.go; pin it byte for byte.
func TestRecordLayout(t *testing.T) {
	rec := make([]byte, HeaderSize+3)
	encodeRecord(rec, 0x0102030405060708, []byte{0xaa, 0xbb, 0xcc})
	want := []byte{
		3, 0, 0, 0, // length
		0, 0, 0, 0, // CRC, checked below
		8, 7, 6, 5, 4, 3, 2, 1, // seq
		0xaa, 0xbb, 0xcc,
	}
	crc := crc32.Checksum(append(want[8:16:16], want[16:]...), crc32.MakeTable(crc32.Castagnoli))
	want[4], want[5], want[6], want[7] = byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24)
	if !bytes.Equal(rec, want) {
		t.Fatalf("record\n got %x\nwant %x", rec, want)
	}
}

func TestRecordDetectsEveryBitFlip(t *testing.T) {
	rec := make([]byte, HeaderSize+64)
	encodeRecord(rec, 7, fillPayload(make([]byte, 64), 7))
	// Flips in the length field change which bytes are checked; the rest
	// must fail the CRC.
	for bit := 32; bit < len(rec)*8; bit++ {
		rec[bit/8] ^= 1 << (bit % 8)
		if decodeHeader(rec).valid(rec) {
			t.Fatalf("flip of bit %d not detected", bit)
		}
		rec[bit/8] ^= 1 << (bit % 8)
	}
}

func TestZeroHeaderIsInvalid(t *testing.T) {
	// Zeros are what a file system shows for blocks lost in a power cut;
	// they must never decode as a record.
	rec := make([]byte, HeaderSize)
	if decodeHeader(rec).valid(rec) {
		t.Fatal("all-zero header passes its CRC")
	}
}
