package spool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// writeRecords writes records first..first+n-1 (payloadFor) to path and
// returns the offset of each.
func writeRecords(t testing.TB, path string, first uint64, n int) []int64 {
	t.Helper()
	var b []byte
	var offs []int64
	for seq := first; seq < first+uint64(n); seq++ {
		p := payloadFor(seq)
		offs = append(offs, int64(len(b)))
		rec := make([]byte, HeaderSize+len(p))
		encodeRecord(rec, seq, p)
		b = append(b, rec...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return offs
}

func TestChunkReaderAcrossChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	// Enough records to span several chunks, so some straddle a boundary.
	offs := writeRecords(t, path, 1, 3*chunkSize/120)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r chunkReader
	r.reset(f)
	for i, off := range offs {
		h, rec, err := r.record(off)
		if err != nil || h.seq != uint64(i+1) {
			t.Fatalf("record %d at %d: %+v, %v", i+1, off, h, err)
		}
		if err := checkPayload(h.seq, rec[HeaderSize:]); err != nil {
			t.Fatal(err)
		}
	}
	end := offs[len(offs)-1] + int64(HeaderSize+len(payloadFor(uint64(len(offs)))))
	if _, _, err := r.record(end); !errors.Is(err, errShort) {
		t.Fatalf("record at EOF: %v, want errShort", err)
	}
}

func TestChunkReaderSeesGrowth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	writeRecords(t, path, 1, 1)
	f, _ := os.Open(path)
	defer f.Close()
	var r chunkReader
	r.reset(f)
	end := int64(HeaderSize + len(payloadFor(1)))
	if _, _, err := r.record(end); !errors.Is(err, errShort) {
		t.Fatalf("before growth: %v", err)
	}
	w, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	p := payloadFor(2)
	rec := make([]byte, HeaderSize+len(p))
	encodeRecord(rec, 2, p)
	w.Write(rec)
	w.Close()
	if h, _, err := r.record(end); err != nil || h.seq != 2 {
		t.Fatalf("after growth: %+v, %v", h, err)
	}
}
