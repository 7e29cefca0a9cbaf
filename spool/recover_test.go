package spool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fillSpool writes n records with small segments and closes the spool.
func fillSpool(t *testing.T, dir string, n int) Options {
	t.Helper()
	opts := Options{SegmentBytes: 4096}
	s := openT(t, dir, opts)
	appendN(t, s, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return opts
}

// lastRecordOffset returns the offset of the last record in segment path.
func lastRecordOffset(t *testing.T, path string) int64 {
	t.Helper()
	f, _ := os.Open(path)
	defer f.Close()
	var r chunkReader
	r.reset(f)
	var off, prev int64
	for {
		_, rec, err := r.record(off)
		if err != nil {
			return prev
		}
		prev, off = off, off+int64(len(rec))
	}
}

func TestOpenTruncatesTornTail(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	files := segFiles(t, dir)
	last := files[len(files)-1]
	cutAt := lastRecordOffset(t, last)
	os.Truncate(last, cutAt+HeaderSize+5) // mid-payload of record 300

	s := openT(t, dir, opts)
	if st := s.Stats(); st.Durable != 299 || st.Truncated != HeaderSize+5 {
		t.Fatalf("after torn tail: %+v", st)
	}
	if got := fileSize(t, last); got != cutAt {
		t.Fatalf("segment is %d bytes, want truncated to %d", got, cutAt)
	}
	if seqs := replayAll(t, s); len(seqs) != 299 {
		t.Fatalf("replayed %d, want 299", len(seqs))
	}
	if seq, err := s.Append(payloadFor(300)); err != nil || seq != 300 {
		t.Fatalf("Append after recovery = %d, %v", seq, err)
	}
	s.Close()
	s = openT(t, dir, opts)
	if seqs := replayAll(t, s); len(seqs) != 300 {
		t.Fatalf("replayed %d after re-append, want 300", len(seqs))
	}
}

func TestOpenTruncatesTornHeader(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 50)
	files := segFiles(t, dir)
	last := files[len(files)-1]
	size := fileSize(t, last)
	f, _ := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{9, 0, 0}) // three bytes of the next header
	f.Close()
	s := openT(t, dir, opts)
	if s.Durable() != 50 || fileSize(t, last) != size {
		t.Fatalf("durable %d, size %d want %d", s.Durable(), fileSize(t, last), size)
	}
}

func TestOpenTruncatesGarbageTail(t *testing.T) {
	for name, junk := range map[string][]byte{
		"random":             randomBytes(10000, 7),
		"zeros, then random": append(make([]byte, 5000), randomBytes(5000, 7)...),
		"random, then zeros": append(randomBytes(5000, 7), make([]byte, 5000)...),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := fillSpool(t, dir, 300)
			files := segFiles(t, dir)
			last := files[len(files)-1]
			size := fileSize(t, last)
			f, _ := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
			f.Write(junk)
			f.Close()
			s := openT(t, dir, opts)
			// What was cut is reported up to its last byte that is not zero:
			// zeros after damage are what the flusher grows segments with.
			dirty := int64(len(junk))
			for dirty > 0 && junk[dirty-1] == 0 {
				dirty--
			}
			if s.Durable() != 300 || fileSize(t, last) != size || s.Stats().Truncated != dirty {
				t.Fatalf("durable %d, size %d (want %d), stats %+v", s.Durable(), fileSize(t, last), size, s.Stats())
			}
			if n := len(replayAll(t, s)); n != 300 {
				t.Fatalf("replayed %d", n)
			}
		})
	}
}

func TestOpenRejectsBitFlipInOlderSegment(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	files := segFiles(t, dir)
	victim := files[len(files)/2]
	b, _ := os.ReadFile(victim)
	off := len(b) / 2
	b[off] ^= 0x20
	os.WriteFile(victim, b, 0o600)

	_, err := Open(dir, opts)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "offset ") {
		t.Fatalf("Open = %v, want ErrCorrupt naming %s and an offset", err, victim)
	}
	t.Log(err)
	// The failed Open must not have changed anything, nor kept the lock.
	if got, _ := os.ReadFile(victim); len(got) != len(b) {
		t.Fatal("failed Open changed the segment")
	}
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("second Open = %v", err)
	}
}

func TestOpenRejectsBitFlipMidLastSegment(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20}
	s := openT(t, dir, opts)
	appendN(t, s, 100)
	s.Close()
	files := segFiles(t, dir)
	last := files[len(files)-1]
	b, _ := os.ReadFile(last)
	b[len(b)/3] ^= 1
	os.WriteFile(last, b, 0o600)
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "good record follows") {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	if got := fileSize(t, last); got != int64(len(b)) {
		t.Fatalf("Open truncated a corrupt (not torn) segment to %d", got)
	}
}

func TestOpenRejectsSequenceGap(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	files := segFiles(t, dir)
	os.Remove(files[3])
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("Open with a missing middle segment = %v", err)
	}
}

func TestOpenRejectsMissingFirstSegment(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	os.Remove(segFiles(t, dir)[0])
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open without the first segment = %v", err)
	}
}

func TestOpenRejectsMarkBeyondRecords(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 10)
	d, _ := os.Open(dir)
	writeMark(dir, d, 11)
	d.Close()
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with mark past the records = %v", err)
	}
}

func TestOpenRejectsCorruptMark(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 10)
	os.WriteFile(filepath.Join(dir, markName), []byte("garbage"), 0o600)
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a corrupt mark = %v", err)
	}
}

// A crash right after a roll created the new segment leaves it empty.
func TestOpenEmptyLastSegment(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 10)
	os.WriteFile(segPath(dir, 11), nil, 0o600)
	s := openT(t, dir, opts)
	if n := len(replayAll(t, s)); n != 10 {
		t.Fatalf("replayed %d", n)
	}
	if seq, err := s.Append(payloadFor(11)); err != nil || seq != 11 {
		t.Fatalf("Append = %d, %v", seq, err)
	}
	s.Sync()
	if fileSize(t, segPath(dir, 11)) == 0 {
		t.Fatal("record 11 did not go to segment 11")
	}
}

// TestOpenReportsWhatItCut: the records and bytes of a cut tail are
// reported, as far as the cut bytes show them.
func TestOpenReportsWhatItCut(t *testing.T) {
	t.Run("truncated mid-record", func(t *testing.T) {
		dir := t.TempDir()
		opts := fillSpool(t, dir, 300)
		files := segFiles(t, dir)
		last := files[len(files)-1]
		cutAt := lastRecordOffset(t, last)
		os.Truncate(last, cutAt+HeaderSize+5)
		s := openT(t, dir, opts)
		want := Dropped{File: last, Offset: cutAt, Bytes: HeaderSize + 5, Records: 1, FirstSeq: 300}
		if got := s.Dropped(); got != want {
			t.Fatalf("Dropped = %+v, want %+v", got, want)
		}
		if st := s.Stats(); st.DroppedRecords != 1 || st.Truncated != HeaderSize+5 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("three damaged records", func(t *testing.T) {
		dir := t.TempDir()
		opts := Options{SegmentBytes: 1 << 20}
		s := openT(t, dir, opts)
		appendN(t, s, 50)
		s.Close()
		last := segFiles(t, dir)[0]
		offs := recordOffsets(t, last)
		b, _ := os.ReadFile(last)
		for _, off := range offs[47:] {
			b[off+HeaderSize+1] ^= 0x40 // payload bytes: the headers still read
		}
		os.WriteFile(last, b, 0o600)
		s = openT(t, dir, opts)
		d := s.Dropped()
		if d.Records != 3 || d.FirstSeq != 48 || d.Offset != offs[47] || d.Bytes != int64(len(b))-offs[47] {
			t.Fatalf("Dropped = %+v (offsets %v)", d, offs[47:])
		}
		if s.Durable() != 47 {
			t.Fatalf("durable %d", s.Durable())
		}
	})
	t.Run("zeros are the end of the log", func(t *testing.T) {
		dir := t.TempDir()
		opts := fillSpool(t, dir, 10)
		last := segFiles(t, dir)[0]
		f, _ := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
		f.Write(make([]byte, 4096))
		f.Close()
		s := openT(t, dir, opts)
		if d := s.Dropped(); d != (Dropped{}) {
			t.Fatalf("Dropped = %+v: zeros after the last record are room grown ahead, not damage", d)
		}
	})
	t.Run("clean", func(t *testing.T) {
		dir := t.TempDir()
		opts := fillSpool(t, dir, 10)
		s := openT(t, dir, opts)
		if d := s.Dropped(); d != (Dropped{}) {
			t.Fatalf("Dropped = %+v on a clean spool", d)
		}
	})
}

// recordOffsets returns the offset of every good record at the start of
// segment path, and where they end.
func recordOffsets(t *testing.T, path string) []int64 {
	offs, _ := goodRecords(t, path)
	return offs
}

func goodRecords(t *testing.T, path string) (offs []int64, end int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r chunkReader
	r.reset(f)
	for off := int64(0); ; {
		_, rec, err := r.record(off)
		if err != nil {
			return offs, off
		}
		offs = append(offs, off)
		off += int64(len(rec))
	}
}
