package spool

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestScanGoodSegment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	writeRecords(t, path, 5, 50)
	for _, last := range []bool{false, true} {
		res, err := scanSegment(path, 5, last)
		if err != nil || res.next != 55 || res.torn() || res.end != fileSize(t, path) {
			t.Fatalf("last=%v: %+v, %v", last, res, err)
		}
	}
}

func TestScanWrongFirstSeq(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	writeRecords(t, path, 5, 3)
	if _, err := scanSegment(path, 4, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func TestScanTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	offs := writeRecords(t, path, 1, 10)
	size := fileSize(t, path)
	// Every cut inside the last record is a torn tail of the last segment
	// and corruption in any other.
	for cut := offs[9] + 1; cut < size; cut++ {
		os.Truncate(path, cut)
		res, err := scanSegment(path, 1, true)
		if err != nil || res.end != offs[9] || res.next != 10 {
			t.Fatalf("cut at %d: %+v, %v", cut, res, err)
		}
		if _, err := scanSegment(path, 1, false); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d, not last: err = %v", cut, err)
		}
	}
}

func TestScanGarbageTail(t *testing.T) {
	for name, junk := range map[string][]byte{
		"zeros":  make([]byte, 8192),
		"random": randomBytes(8192, 1),
		"short":  {1, 2, 3},
		// A header whose length points far past the end of the file.
		"bighdr": {0xff, 0xff, 0, 0, 1, 2, 3, 4, 11, 0, 0, 0, 0, 0, 0, 0},
	} {
		path := filepath.Join(t.TempDir(), "seg")
		writeRecords(t, path, 1, 10)
		good := fileSize(t, path)
		f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		f.Write(junk)
		f.Close()
		res, err := scanSegment(path, 1, true)
		if err != nil || res.end != good || res.next != 11 {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
	}
}

func TestScanFlipBeforeGoodRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	offs := writeRecords(t, path, 1, 10)
	b, _ := os.ReadFile(path)
	// Flip one bit of record 5: records 6..10 follow, so this cannot be a
	// torn write, even in the last segment.
	b[offs[4]+HeaderSize+3] ^= 0x04
	os.WriteFile(path, b, 0o600)
	for _, last := range []bool{false, true} {
		_, err := scanSegment(path, 1, last)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) ||
			!strings.Contains(err.Error(), "offset "+strconv.FormatInt(offs[4], 10)) {
			t.Fatalf("last=%v: err = %v, want ErrCorrupt naming %s and offset %d", last, err, path, offs[4])
		}
	}
}

func TestScanFlipInLastRecordIsTail(t *testing.T) {
	// The known limit: damage to the last record of the last segment looks
	// exactly like a torn write and is cut away.
	path := filepath.Join(t.TempDir(), "seg")
	offs := writeRecords(t, path, 1, 10)
	b, _ := os.ReadFile(path)
	b[offs[9]+HeaderSize] ^= 1
	os.WriteFile(path, b, 0o600)
	res, err := scanSegment(path, 1, true)
	if err != nil || res.end != offs[9] {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestScanBadLengthBeforeGoodRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	offs := writeRecords(t, path, 1, 10)
	b, _ := os.ReadFile(path)
	b[offs[2]+2] = 0x7f // length of record 3 now far above MaxPayload
	os.WriteFile(path, b, 0o600)
	if _, err := scanSegment(path, 1, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

// randomBytes returns n reproducible pseudo-random bytes.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}
