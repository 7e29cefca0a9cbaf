package spool

import (
	"errors"
	"os"
	"testing"
)

func TestReleaseDeletesWholeSegments(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096}
	s := openT(t, dir, opts)
	appendN(t, s, 1000)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	before := segFiles(t, dir)

	if err := s.Release(1001); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("Release beyond durable = %v", err)
	}
	if err := s.Release(500); err != nil {
		t.Fatal(err)
	}
	after := segFiles(t, dir)
	if len(after) >= len(before) {
		t.Fatalf("Release(500) kept all %d segments", len(before))
	}
	// The first kept segment holds 501; every deleted one ended ≤ 500.
	firsts, _ := listSegments(dir)
	if firsts[0] > 501 || (len(firsts) > 1 && firsts[1] <= 501) {
		t.Fatalf("segments after Release(500) start %v", firsts[:2])
	}
	if st := s.Stats(); st.Released != 500 || st.Segments != len(after) || st.Deleted != uint64(len(before)-len(after)) {
		t.Fatalf("stats %+v", st)
	}
	// Released records are not read again, even those still in a segment.
	var first uint64
	s.Read(0, 1, func(seq uint64, _ []byte) error { first = seq; return nil })
	if first != 501 {
		t.Fatalf("Read(0) after Release(500) starts at %d", first)
	}
	if err := s.Release(200); err != nil {
		t.Fatalf("Release below the mark = %v", err)
	}

	s.Close()
	s = openT(t, dir, opts)
	seqs := replayAll(t, s)
	if len(seqs) != 500 || seqs[0] != 501 {
		t.Fatalf("replay after Release(500): %d records from %v", len(seqs), seqs[:1])
	}
	if err := s.Release(1000); err != nil {
		t.Fatal(err)
	}
	if n := len(segFiles(t, dir)); n != 1 {
		t.Fatalf("%d segments after releasing everything, want the active one", n)
	}
	appendN(t, s, 1)
	s.Close()
	s = openT(t, dir, opts)
	if seqs := replayAll(t, s); len(seqs) != 1 || seqs[0] != 1001 {
		t.Fatalf("replay = %v, want [1001]", seqs)
	}
}

// A crash between persisting the mark and deleting the segments leaves
// released segments behind; Open deletes them.
func TestOpenFinishesInterruptedRelease(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096}
	s := openT(t, dir, opts)
	appendN(t, s, 1000)
	s.Close()
	n := len(segFiles(t, dir))
	d, _ := os.Open(dir)
	if err := writeMark(dir, d, 600); err != nil {
		t.Fatal(err)
	}
	d.Close()
	os.WriteFile(dir+"/"+markTmpName, []byte("half a mark"), 0o600)

	s = openT(t, dir, opts)
	if got := len(segFiles(t, dir)); got >= n {
		t.Fatalf("%d segments, had %d", got, n)
	}
	if _, err := os.Stat(dir + "/" + markTmpName); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp mark not removed: %v", err)
	}
	if seqs := replayAll(t, s); len(seqs) != 400 || seqs[0] != 601 {
		t.Fatalf("replayed %d from %v", len(seqs), seqs[:1])
	}
}
