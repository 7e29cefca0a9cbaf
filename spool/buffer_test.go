package spool

import "testing"

func TestPendingChunks(t *testing.T) {
	p := newPending(1 << 20)
	if cap(p.filled) < maxChunks(1<<20) || maxChunks(1<<20) < 2*(1<<20)/chunkBytes {
		t.Fatalf("chunk lists sized %d for %d chunks", cap(p.filled), maxChunks(1<<20))
	}
	// Fill past three chunks with 1000-byte records.
	total := 0
	for total < 3*chunkBytes+500 {
		b := p.reserve(1000)
		if len(b) != 1000 {
			t.Fatalf("reserve gave %d bytes", len(b))
		}
		total += 1000
	}
	if p.bytes != total || len(p.filled) != 3 {
		t.Fatalf("bytes %d (want %d), %d sealed chunks", p.bytes, total, len(p.filled))
	}
	sum := len(p.cur)
	for _, c := range p.filled {
		if len(c) > chunkBytes || len(c) <= chunkBytes-1000 {
			t.Fatalf("sealed chunk holds %d bytes", len(c))
		}
		sum += len(c)
	}
	if sum != p.bytes {
		t.Fatalf("chunks hold %d bytes, bytes = %d", sum, p.bytes)
	}

	batch := p.takeAll(nil)
	if len(batch) != 4 || p.bytes != 0 || len(p.filled) != 0 || p.cur != nil {
		t.Fatalf("takeAll: %d chunks, pending %+v", len(batch), p)
	}
	p.recycle(batch, 1<<30)
	if len(p.free) != 4 || batch[0] != nil {
		t.Fatalf("recycle kept %d free chunks", len(p.free))
	}
	// Reuse: no new chunk while free ones remain.
	p.reserve(10)
	if len(p.free) != 3 {
		t.Fatalf("reserve on an empty buffer left %d free chunks", len(p.free))
	}
	p.recycle(p.takeAll(nil), keepFree-2)
	if len(p.free) != keepFree-2 {
		t.Fatalf("trimmed free list holds %d chunks", len(p.free))
	}
}

func TestPendingLargestRecordFitsAChunk(t *testing.T) {
	p := newPending(minMaxPendingBytes)
	for range 9 {
		if b := p.reserve(maxRecord); len(b) != maxRecord {
			t.Fatal("largest record did not fit")
		}
	}
	if len(p.filled) != 2 { // four per chunk
		t.Fatalf("%d sealed chunks for 9 largest records", len(p.filled))
	}
}
