package spool

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

func TestCut(t *testing.T) {
	var batch []byte
	for seq := uint64(1); seq <= 4; seq++ {
		rec := make([]byte, HeaderSize+84) // 100 bytes each
		encodeRecord(rec, seq, make([]byte, 84))
		batch = append(batch, rec...)
	}
	for _, c := range []struct {
		room int64
		want int
	}{
		{1000, 400}, {400, 400}, {399, 400}, {301, 400}, {300, 300},
		{201, 300}, {101, 200}, {100, 100}, {1, 100},
	} {
		if got := cut(batch, c.room); got != c.want {
			t.Errorf("cut(room %d) = %d, want %d", c.room, got, c.want)
		}
	}
}

func TestSegmentRoll(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 4096
	s := openT(t, dir, Options{SegmentBytes: segBytes})
	appendN(t, s, 1000)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	files := segFiles(t, dir)
	st := s.Stats()
	if len(files) < 20 || st.Segments != len(files) || st.Rolls != uint64(len(files)-1) {
		t.Fatalf("%d files, stats %+v", len(files), st)
	}
	next := uint64(1)
	for i, path := range files {
		size := fileSize(t, path)
		if i < len(files)-1 && (size < segBytes || size >= segBytes+HeaderSize+150) {
			t.Fatalf("%s: %d bytes, want [%d, %d)", path, size, segBytes, segBytes+HeaderSize+150)
		}
		if first, _ := parseSegName(path[len(dir)+1:]); first != next {
			t.Fatalf("%s: first seq %d, want %d", path, first, next)
		}
		res, err := scanSegment(path, next, i == len(files)-1)
		if err != nil || res.torn() {
			t.Fatalf("%s: %+v, %v", path, res, err)
		}
		next = res.next
	}
	if next != 1001 {
		t.Fatalf("segments end at %d", next-1)
	}
}

// A record larger than SegmentBytes still goes in, one per segment.
func TestSegmentSmallerThanRecord(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{SegmentBytes: 10})
	appendN(t, s, 5)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := len(segFiles(t, dir)); n != 5 {
		t.Fatalf("%d segments, want 5", n)
	}
	s.Close()
	s = openT(t, dir, Options{SegmentBytes: 10})
	if n := len(replayAll(t, s)); n != 5 {
		t.Fatalf("replayed %d", n)
	}
}

// Under a steady stream the flusher batches: many records per fdatasync,
// and flushes no more often than FlushInterval.
func TestGroupCommit(t *testing.T) {
	const interval = 5 * time.Millisecond
	var calls, lastSeq atomic.Uint64
	s := openT(t, t.TempDir(), Options{
		FlushInterval: interval,
		OnDurable: func(seq uint64) {
			calls.Add(1)
			if prev := lastSeq.Swap(seq); seq <= prev {
				t.Errorf("OnDurable(%d) after %d", seq, prev)
			}
		},
	})
	start := time.Now()
	p := make([]byte, 128)
	n := 0
	for time.Since(start) < 200*time.Millisecond {
		if _, err := s.Append(p); err == nil {
			n++
		}
		if n%64 == 0 {
			pause(50 * time.Microsecond)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	st := s.Stats()
	if lastSeq.Load() != uint64(n) || st.Durable != uint64(n) {
		t.Fatalf("OnDurable last %d, Durable %d, appended %d", lastSeq.Load(), st.Durable, n)
	}
	if st.Flushes != calls.Load() {
		t.Fatalf("%d flushes, %d OnDurable calls", st.Flushes, calls.Load())
	}
	// +2: the first record flushes at once, Sync adds one.
	if maxFlushes := uint64(elapsed/interval) + 2; st.Flushes > maxFlushes {
		t.Fatalf("%d flushes in %v, at most %d expected", st.Flushes, elapsed, maxFlushes)
	}
	if uint64(n)/st.Flushes < 10 {
		t.Fatalf("%d records in %d flushes: no batching", n, st.Flushes)
	}
	t.Logf("%d records, %d flushes, mean fdatasync %v", n, st.Flushes, st.MeanSync())
}

// MaxBatchBytes pending start a flush without waiting for the interval.
func TestBatchBytesFlushEarly(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushInterval: time.Second, MaxBatchBytes: 64 << 10})
	appendN(t, s, 1)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 1024-HeaderSize)
	for range 64 {
		if _, err := s.Append(p); err != nil {
			t.Fatal(err)
		}
	}
	// The bound is the property: less than the interval (1 s, the
	// longest there is) since the flush Sync started.
	if !await.Poll(800*time.Millisecond, func() bool { return s.Durable() >= 65 }) {
		t.Fatalf("Durable %d: a full batch waited for the interval", s.Durable())
	}
}

func TestEncodedSeqIsAtOffset8(t *testing.T) {
	// write() reads a batch's first seq straight from the encoding.
	rec := make([]byte, HeaderSize)
	encodeRecord(rec, 77, nil)
	if binary.LittleEndian.Uint64(rec[8:]) != 77 {
		t.Fatal("seq not at offset 8")
	}
}

// After a failed write or sync nothing more may be reported durable: the
// failure is sticky and every later call says so.
func TestWriteFailureIsSticky(t *testing.T) {
	var notices atomic.Uint64
	s := openT(t, t.TempDir(), Options{OnDurable: func(uint64) { notices.Add(1) }})
	appendN(t, s, 10)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	before := notices.Load()
	s.seg.Close() // the flusher is idle; its next write fails
	appendN(t, s, 1)
	if err := s.Sync(); !errors.Is(err, ErrBroken) {
		t.Fatalf("Sync after a failed write = %v, want ErrBroken", err)
	}
	if _, err := s.Append(payloadFor(12)); !errors.Is(err, ErrBroken) {
		t.Fatalf("Append after a failed write = %v", err)
	}
	if s.Durable() != 10 || notices.Load() != before {
		t.Fatalf("Durable %d, %d notices (had %d)", s.Durable(), notices.Load(), before)
	}
	if err := s.Close(); !errors.Is(err, ErrBroken) {
		t.Fatalf("Close = %v, want ErrBroken", err)
	}
}
