package spool

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// growOpts grows segments in small steps, so tests see several.
var growOpts = Options{SegmentBytes: 64 << 10, GrowBytes: 4096}

// crashedWithZeros appends n records to a new spool in dir, syncs, and
// crashes it, leaving the last segment with zeros after its records. It
// returns the segment's path and where its records end.
func crashedWithZeros(t *testing.T, dir string, n int) (path string, end int64) {
	t.Helper()
	s, err := Open(dir, growOpts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, n)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.crash()
	files := segFiles(t, dir)
	path = files[len(files)-1]
	end = recordsEnd(t, path)
	if size := fileSize(t, path); size <= end || size%growOpts.GrowBytes != 0 {
		t.Fatalf("segment %d bytes, records end at %d: not grown ahead in steps of %d", size, end, growOpts.GrowBytes)
	}
	return path, end
}

// recordsEnd returns where the good records at the start of segment path
// end.
func recordsEnd(t *testing.T, path string) int64 {
	t.Helper()
	_, end := goodRecords(t, path)
	return end
}

// encoded returns the records first..first+n-1 as the flusher writes them.
func encoded(first uint64, n int) []byte {
	var b []byte
	for seq := first; seq < first+uint64(n); seq++ {
		p := payloadFor(seq)
		rec := make([]byte, HeaderSize+len(p))
		encodeRecord(rec, seq, p)
		b = append(b, rec...)
	}
	return b
}

// TestSegmentsGrowAheadInSteps: the segment being written is longer than
// its records by durable zeros, grown in GrowBytes steps, and Stats counts
// the steps apart from the batches' syncs.
func TestSegmentsGrowAheadInSteps(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, growOpts)
	appendN(t, s, 100) // ~17 KiB: several steps
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	path := segFiles(t, dir)[0]
	st := s.Stats()
	size := fileSize(t, path)
	if int64(st.FlushedBytes) >= size || size%growOpts.GrowBytes != 0 || st.Grows == 0 || st.Grows > uint64(size/growOpts.GrowBytes) {
		t.Fatalf("file %d bytes for %d bytes of records after %d grows", size, st.FlushedBytes, st.Grows)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, path); got != int64(st.FlushedBytes) {
		t.Fatalf("after Close the segment is %d bytes, its records %d: not trimmed", got, st.FlushedBytes)
	}
}

// TestGrowBytesNegativeAppends: with growing ahead off, the segment is its
// records and nothing else at every moment.
func TestGrowBytesNegativeAppends(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{GrowBytes: -1})
	appendN(t, s, 100)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if size := fileSize(t, segFiles(t, dir)[0]); size != int64(st.FlushedBytes) || st.Grows != 0 {
		t.Fatalf("file %d bytes for %d bytes of records, %d grows", size, st.FlushedBytes, st.Grows)
	}
}

// TestRolledSegmentsHoldRecordsOnly: a segment the flusher rolls from is
// trimmed to its records, so archived segments, and the archive's size,
// count records, not zeros. Growing stops at SegmentBytes, so the zeros a
// roll trims are those a crash left under a larger SegmentBytes.
func TestRolledSegmentsHoldRecordsOnly(t *testing.T) {
	dir, opts := archiveOpts(t, 1<<30, 1<<40)
	big := opts
	big.SegmentBytes, big.GrowBytes = 1<<20, 64<<10
	s := openT(t, dir, big)
	appendN(t, s, 10)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.crash()
	if size := fileSize(t, segFiles(t, dir)[0]); size != big.GrowBytes {
		t.Fatalf("segment %d bytes, want one step of %d", size, big.GrowBytes)
	}

	opts.GrowBytes = 1024
	s = openT(t, dir, opts)
	last := appendN(t, s, 300)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	files := segFiles(t, dir)
	if len(files) < 4 {
		t.Fatalf("%d segments, want several", len(files))
	}
	for _, path := range files[:len(files)-1] {
		if size, end := fileSize(t, path), recordsEnd(t, path); size != end {
			t.Fatalf("%s: %d bytes, its records end at %d", path, size, end)
		}
	}
	if err := s.Release(last - 1); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	var records int64
	entries, _ := os.ReadDir(opts.ArchiveDir)
	for _, e := range entries {
		records += recordsEnd(t, filepath.Join(opts.ArchiveDir, e.Name()))
	}
	if st.ArchiveBytes != records || st.ArchiveSegments != len(files)-1 {
		t.Fatalf("archive: %d segments, %d bytes; its records take %d", st.ArchiveSegments, st.ArchiveBytes, records)
	}
	wantRun(t, followAll(t, s, 0, last, 7), 1, last)
}

// TestCrashAtEveryPointOfAWriteIntoZeros: a crash can leave any prefix of
// the next batch in the zeros after the last durable record. Open keeps
// exactly the records that are whole, cuts a torn one (reporting it), and
// appends continue right after the records, inside the zeros.
func TestCrashAtEveryPointOfAWriteIntoZeros(t *testing.T) {
	dir := t.TempDir()
	path, end := crashedWithZeros(t, dir, 40)
	image, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	next := encoded(41, 2)
	if end+int64(len(next)) > int64(len(image)) {
		t.Fatal("the zeros do not hold two more records")
	}
	firstLen := HeaderSize + len(payloadFor(41))
	for k := 0; k <= len(next); k++ {
		b := slices.Clone(image)
		copy(b[end:], next[:k])
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		whole, wholeBytes := 0, 0 // records written whole, and their bytes
		switch {
		case k == len(next):
			whole, wholeBytes = 2, len(next)
		case k >= firstLen:
			whole, wholeBytes = 1, firstLen
		}
		cut := k - wholeBytes // bytes of a torn record, reported up to the last that is not zero
		for cut > 0 && next[wholeBytes+cut-1] == 0 {
			cut--
		}
		s, err := Open(dir, growOpts)
		if err != nil {
			t.Fatalf("k=%d: Open: %v", k, err)
		}
		durable := uint64(40 + whole)
		d := s.Dropped()
		switch {
		case s.Durable() != durable:
			t.Fatalf("k=%d: durable %d, want %d", k, s.Durable(), durable)
		case cut == 0 && d != (Dropped{}):
			t.Fatalf("k=%d: Dropped %+v, want nothing cut", k, d)
		case cut > 0 && (d.Offset != end+int64(wholeBytes) || d.Bytes != int64(cut) || d.Records > 1 || d.FirstSeq != durable+1):
			// Records: 1 once the torn header shows its sequence number.
			t.Fatalf("k=%d: Dropped %+v", k, d)
		}
		// Appends continue right after the records, not at the end of
		// the file.
		appendN(t, s, 3)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		s.crash()
		s = openT(t, dir, growOpts)
		if seqs := replayAll(t, s); len(seqs) != int(durable)+3 {
			t.Fatalf("k=%d: replayed %d records, want %d", k, len(seqs), durable+3)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if os.RemoveAll(dir) != nil {
			t.Fatal("cleanup")
		}
		if p, e := crashedWithZeros(t, dir, 40); p != path || e != end {
			t.Fatalf("rebuilt %s ending at %d, want %s at %d", p, e, path, end)
		}
	}
}

// TestZerosThenRecordsOfAnUnsyncedBatchAreATornTail: records go into
// grown zeros, so a crash during a batch's fdatasync may leave a later
// page of the batch on disk and an earlier one not (a volatile disk cache
// keeps no order): zeros, then whole records. None was acknowledged — an
// answer waits for the whole sync — so Open cuts them as a torn tail and
// says how many. Zeros then a record that is not the batch's (not
// consecutive, or with more after) are still damage.
func TestZerosThenRecordsOfAnUnsyncedBatchAreATornTail(t *testing.T) {
	dir := t.TempDir()
	path, end := crashedWithZeros(t, dir, 40)
	image, _ := os.ReadFile(path)
	b := slices.Clone(image)
	at := end + int64(HeaderSize+len(payloadFor(41)))
	copy(b[at:], encoded(42, 2)) // 41's page lost; 42 and 43 there
	os.WriteFile(path, b, 0o600)
	s, err := Open(dir, growOpts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if d := s.Dropped(); s.Durable() != 40 || d.Offset != end || d.Records != 3 || d.FirstSeq != 41 {
		t.Fatalf("durable %d, Dropped %+v; want 40 kept and 41-43 cut", s.Durable(), d)
	}
	appendN(t, s, 3)
	s.Close()
	if s = openT(t, dir, growOpts); s.Durable() != 43 {
		t.Fatalf("after appending again: durable %d, want 43", s.Durable())
	}
	s.Close()

	dir = t.TempDir()
	path, end = crashedWithZeros(t, dir, 40)
	b, _ = os.ReadFile(path)
	rec := encoded(42, 1)
	copy(b[end+int64(HeaderSize+len(payloadFor(41))):], rec)
	copy(b[end+int64(HeaderSize+len(payloadFor(41))+len(rec))+100:], encoded(44, 1)) // not consecutive
	os.WriteFile(path, b, 0o600)
	if _, err := Open(dir, growOpts); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "a good record follows") {
		t.Fatalf("Open = %v, want ErrCorrupt: a good record follows", err)
	}
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || !slices.Equal(rep.Lost, []SeqRange{{41, 41}, {43, 43}}) || rep.Records != 42 {
		t.Fatalf("report %+v", rep)
	}
}

// TestVerifyAndQuarantineGrownSegment: Verify counts the zeros after the
// last record as room, not damage, and Quarantine of a spool whose last
// segment has them (and damage elsewhere) keeps every good record.
func TestVerifyAndQuarantineGrownSegment(t *testing.T) {
	dir := t.TempDir()
	path, end := crashedWithZeros(t, dir, 40)
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	seg := rep.Segments[len(rep.Segments)-1]
	if !rep.Clean() || rep.Records != 40 || len(seg.Damage) != 0 || seg.Free != seg.Size-end {
		t.Fatalf("report %+v, segment %+v", rep, seg)
	}
	var text strings.Builder
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "are zeros") || !strings.Contains(text.String(), "start-up: ok, clean") {
		t.Fatalf("report text:\n%s", text.String())
	}

	// Damage a record in the middle: Open refuses, Quarantine keeps the rest.
	offs := recordOffsets(t, path)
	b, _ := os.ReadFile(path)
	b[offs[10]+HeaderSize+3] ^= 0x10
	os.WriteFile(path, b, 0o600)
	if _, err := Open(dir, growOpts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	q, err := Quarantine(dir, filepath.Join(t.TempDir(), "q"))
	if err != nil || q.Kept != 39 {
		t.Fatalf("Quarantine = %+v, %v", q, err)
	}
	s := openT(t, dir, growOpts)
	if n := len(replayAll(t, s)); n != 40 { // 39 and a hole
		t.Fatalf("replayed %d", n)
	}
}

// TestReadAfterZerosWereOverwritten: a reader that has buffered the zeros
// after the last record reads the records written into them later.
func TestReadAfterZerosWereOverwritten(t *testing.T) {
	s := openT(t, t.TempDir(), growOpts)
	for round := 0; round < 5; round++ {
		last := appendN(t, s, 7)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		after := last - 7
		got, err := s.Read(after, 100, func(seq uint64, p []byte) error { return checkPayload(seq, p) })
		if err != nil || got != last {
			t.Fatalf("round %d: Read(%d) = %d, %v; want %d", round, after, got, err, last)
		}
		wantRun(t, followAll(t, s, after, last, 3), after+1, last)
	}
}

// TestReadAcrossARollFromAGrownSegment: Read and Follow continue from a
// segment that was rolled (and trimmed) into the next one.
func TestReadAcrossARollFromAGrownSegment(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{SegmentBytes: 4096, GrowBytes: 8192})
	var after uint64
	for range 20 {
		last := appendN(t, s, 9)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		got, err := s.Read(after, 100, func(seq uint64, p []byte) error { return checkPayload(seq, p) })
		if err != nil || got != last {
			t.Fatalf("Read(%d) = %d, %v; want %d", after, got, err, last)
		}
		after = last
	}
	if len(segFiles(t, dir)) < 5 {
		t.Fatalf("%d segments", len(segFiles(t, dir)))
	}
	wantRun(t, followAll(t, s, 0, after, 11), 1, after)
}
