package spool

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// origSeq is the sequence number a test payload was made for
// (payloadFor), whatever sequence number its record carries now.
func origSeq(p []byte) uint64 {
	var seq uint64
	for i := 7; i >= 0; i-- {
		seq = seq<<8 | uint64(p[i]^byte(i*7))
	}
	return seq
}

// originals replays the spool in dir and returns, in order, the sequence
// numbers its payloads were made for, checking that the records' own
// sequence numbers run on from released without a gap and that every
// record kept its number (a lost one's is an empty record).
func originals(t *testing.T, dir string) []uint64 {
	t.Helper()
	s := openT(t, dir, Options{})
	var out []uint64
	want := s.Stats().Released + 1
	err := s.Replay(func(seq uint64, p []byte) error {
		if seq != want {
			t.Fatalf("replay seq %d, want %d", seq, want)
		}
		want++
		if len(p) == 0 {
			return nil // the hole Quarantine leaves for a lost record
		}
		o := origSeq(p)
		if o != seq {
			t.Fatalf("record %d was made for %d: renumbered", seq, o)
		}
		if err := checkPayload(o, p); err != nil {
			t.Fatalf("record %d (made for %d): %v", seq, o, err)
		}
		out = append(out, o)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// seqsExcept is first..last without the numbers in skip.
func seqsExcept(first, last uint64, skip ...uint64) []uint64 {
	var out []uint64
	for s := first; s <= last; s++ {
		if !slices.Contains(skip, s) {
			out = append(out, s)
		}
	}
	return out
}

// flipRecord flips a payload bit of record number i (0-based) of segment
// path and returns the record's offset.
func flipRecord(t *testing.T, path string, i int) int64 {
	t.Helper()
	offs := recordOffsets(t, path)
	b, _ := os.ReadFile(path)
	b[offs[i]+HeaderSize+2] ^= 0x10
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return offs[i]
}

func TestVerifyCleanSpool(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	s := openT(t, dir, opts)
	if err := s.Release(100); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Records != 200 || rep.Released != 100 || len(rep.Lost) != 0 || rep.MarkDamaged {
		t.Fatalf("report %+v", rep)
	}
	for _, seg := range rep.Segments {
		if len(seg.Damage) != 0 {
			t.Fatalf("damage in a clean spool: %+v", seg)
		}
	}
	q, err := Quarantine(dir, filepath.Join(t.TempDir(), "q"))
	if err != nil || q.Moved != "" || q.Kept != 0 {
		t.Fatalf("Quarantine of a clean spool: %+v, %v", q, err)
	}
}

func TestVerifyRefusesASpoolInUse(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	appendN(t, s, 3)
	if _, err := Verify(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Verify of an open spool = %v, want ErrLocked", err)
	}
	if _, err := Quarantine(dir, filepath.Join(t.TempDir(), "q")); !errors.Is(err, ErrLocked) {
		t.Fatalf("Quarantine of an open spool = %v, want ErrLocked", err)
	}
	if _, err := Verify(filepath.Join(dir, "nope")); err == nil {
		t.Fatal("Verify of a missing directory succeeded")
	}
}

// TestVerifyAndQuarantineTornTail: start-up would cut the tail; Verify
// says so and counts the record cut; Quarantine keeps the same records
// and the original bytes.
func TestVerifyAndQuarantineTornTail(t *testing.T) {
	dir := t.TempDir()
	fillSpool(t, dir, 300)
	files := segFiles(t, dir)
	last := files[len(files)-1]
	cutAt := lastRecordOffset(t, last)
	os.Truncate(last, cutAt+HeaderSize+5)

	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Dropped{File: last, Offset: cutAt, Bytes: HeaderSize + 5, Records: 1, FirstSeq: 300}
	if rep.Clean() || rep.Start != nil || rep.Tail != want || rep.Records != 299 ||
		!slices.Equal(rep.Lost, []SeqRange{{300, 300}}) {
		t.Fatalf("report %+v", rep)
	}
	dest := filepath.Join(t.TempDir(), "q", "1")
	q, err := Quarantine(dir, dest)
	if err != nil || q.Kept != 299 || q.Moved != dest {
		t.Fatalf("Quarantine = %+v, %v", q, err)
	}
	if got := originals(t, dir); !slices.Equal(got, seqsExcept(1, 299)) {
		t.Fatalf("rebuilt spool holds %v", got)
	}
	// The original is in dest, byte for byte, with the report.
	if fileSize(t, filepath.Join(dest, filepath.Base(last))) != cutAt+HeaderSize+5 {
		t.Fatal("the quarantined segment is not the original")
	}
	note, err := os.ReadFile(filepath.Join(dest, quarantineNote))
	if err != nil || !strings.Contains(string(note), "300-300") {
		t.Fatalf("note %q, %v", note, err)
	}
}

// TestQuarantineKeepsGoodRecordsAroundDamage: a damaged record in an older
// segment makes start-up refuse; Verify names the file and offset and
// finds the good records after it; Quarantine keeps all of them, and the
// spool opens again.
func TestQuarantineKeepsGoodRecordsAroundDamage(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	s := openT(t, dir, opts)
	s.Release(20) // segment 1 holds released records
	s.Close()
	files := segFiles(t, dir)
	victim := files[len(files)/2]
	first, _ := parseSegName(filepath.Base(victim))
	off := flipRecord(t, victim, 3)
	lost := first + 3

	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Start == nil || !strings.Contains(rep.Start.Error(), victim) || !slices.Equal(rep.Lost, []SeqRange{{lost, lost}}) ||
		rep.Records != 300-20-1 {
		t.Fatalf("report: start %v, lost %v, records %d", rep.Start, rep.Lost, rep.Records)
	}
	var damage []Damage
	for _, seg := range rep.Segments {
		if seg.Path == victim {
			damage = seg.Damage
		} else if len(seg.Damage) != 0 {
			t.Fatalf("damage reported in %s: %+v", seg.Path, seg.Damage)
		}
	}
	if len(damage) != 1 || damage[0].Offset != off || damage[0].Seq != lost || damage[0].Bytes != int64(HeaderSize+len(payloadFor(lost))) {
		t.Fatalf("damage %+v, want the one record at offset %d", damage, off)
	}

	dest := filepath.Join(t.TempDir(), "q")
	q, err := Quarantine(dir, dest)
	if err != nil || q.Kept != rep.Records {
		t.Fatalf("Quarantine = %+v, %v", q, err)
	}
	if got := originals(t, dir); !slices.Equal(got, seqsExcept(21, 300, lost)) {
		t.Fatalf("rebuilt spool holds %v", got)
	}
	if _, err := os.Stat(filepath.Join(dest, filepath.Base(victim))); err != nil {
		t.Fatalf("damaged segment not quarantined: %v", err)
	}
	if rep, err := Verify(dir); err != nil || !rep.Clean() || rep.Released != 20 {
		t.Fatalf("after quarantine: %+v, %v", rep, err)
	}
}

func TestQuarantineMissingSegment(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	files := segFiles(t, dir)
	gone, _ := parseSegName(filepath.Base(files[3]))
	after, _ := parseSegName(filepath.Base(files[4]))
	os.Remove(files[3])
	rep, err := Verify(dir)
	if err != nil || rep.Start == nil || !slices.Equal(rep.Lost, []SeqRange{{gone, after - 1}}) {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if _, err := Quarantine(dir, filepath.Join(t.TempDir(), "q")); err != nil {
		t.Fatal(err)
	}
	var skip []uint64
	for s := gone; s < after; s++ {
		skip = append(skip, s)
	}
	if got := originals(t, dir); !slices.Equal(got, seqsExcept(1, 300, skip...)) {
		t.Fatalf("rebuilt spool holds %v", got)
	}
	if _, err := Open(dir, opts); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDamagedMark(t *testing.T) {
	dir := t.TempDir()
	fillSpool(t, dir, 50)
	os.WriteFile(filepath.Join(dir, markName), []byte("garbage"), 0o600)
	rep, err := Verify(dir)
	if err != nil || !rep.MarkDamaged || rep.Released != 0 || rep.Records != 50 || rep.Start == nil {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if _, err := Quarantine(dir, filepath.Join(t.TempDir(), "q")); err != nil {
		t.Fatal(err)
	}
	if got := originals(t, dir); !slices.Equal(got, seqsExcept(1, 50)) {
		t.Fatalf("rebuilt spool holds %v", got)
	}
}

// TestQuarantineFinishesAnInterruptedRun: a partial rebuild is discarded
// and redone; an original left beside the spool after the swap is moved
// to the destination.
func TestQuarantineFinishesAnInterruptedRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	os.Mkdir(dir, 0o700)
	seg := segPath(dir, 1)
	writeRecords(t, seg, 1, 100)
	flipRecord(t, seg, 10)
	stage := dir + ".rebuild"
	os.Mkdir(stage, 0o700)
	os.WriteFile(filepath.Join(stage, "junk.seg"), []byte("partial"), 0o600)
	dest := filepath.Join(t.TempDir(), "q")
	q, err := Quarantine(dir, dest)
	if err != nil || q.Kept != 99 {
		t.Fatalf("Quarantine over a partial rebuild = %+v, %v", q, err)
	}
	if _, err := os.Stat(stage); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stage left behind: %v", err)
	}

	// Interrupted after the swap: the original, with its note, is beside
	// the spool.
	orig := filepath.Join(t.TempDir(), "orig")
	if err := os.Rename(dest, orig); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(orig, stage); err != nil {
		t.Fatal(err)
	}
	dest2 := filepath.Join(t.TempDir(), "q2")
	q, err = Quarantine(dir, dest2)
	if err != nil || q.Moved != "" || !q.Report.Clean() {
		t.Fatalf("second Quarantine = %+v, %v", q, err)
	}
	if _, err := os.Stat(filepath.Join(dest2, quarantineNote)); err != nil {
		t.Fatalf("the original was not moved aside: %v", err)
	}
}

// TestQuarantineMarkBeyondRecords: records the mark says were billed are
// gone from the end of the spool (a truncation); nothing unreleased is
// lost, and the rebuilt spool continues after the mark.
func TestQuarantineMarkBeyondRecords(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 10)
	d, _ := os.Open(dir)
	writeMark(dir, d, 15)
	d.Close()
	rep, err := Verify(dir)
	if err != nil || rep.Start == nil || rep.Records != 0 || len(rep.Lost) != 0 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if q, err := Quarantine(dir, filepath.Join(t.TempDir(), "q")); err != nil || q.Kept != 0 {
		t.Fatalf("Quarantine = %+v, %v", q, err)
	}
	s := openT(t, dir, opts)
	if seq, err := s.Append(payloadFor(16)); err != nil || seq != 16 {
		t.Fatalf("Append after quarantine = %d, %v", seq, err)
	}
}
