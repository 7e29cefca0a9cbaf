package spool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// archiveOpts are small segments and an archive beside the spool.
func archiveOpts(t *testing.T, maxBytes int64, maxAge time.Duration) (string, Options) {
	root := t.TempDir()
	return filepath.Join(root, "spool"), Options{SegmentBytes: 4096, ArchiveDir: filepath.Join(root, "archive"),
		ArchiveMaxBytes: maxBytes, ArchiveMaxAge: maxAge}
}

// follower pages through s from after with pages of page records, checking
// each payload and that sequence numbers follow each other, until it has
// read up to upTo; it returns the sequence numbers seen.
func followAll(t *testing.T, s *Spool, after, upTo uint64, page int) []uint64 {
	t.Helper()
	var seen []uint64
	for after < upTo {
		want := after + 1
		last, err := s.Follow(after, page, func(seq uint64, p []byte) error {
			if seq != want {
				t.Fatalf("Follow: seq %d, want %d", seq, want)
			}
			want++
			if err := checkPayload(seq, p); err != nil {
				t.Fatalf("Follow seq %d: %v", seq, err)
			}
			seen = append(seen, seq)
			return nil
		})
		if err != nil {
			t.Fatalf("Follow(%d): %v", after, err)
		}
		if last == after {
			t.Fatalf("Follow(%d) read nothing below %d", after, upTo)
		}
		after = last
	}
	return seen
}

func wantRun(t *testing.T, seen []uint64, from, to uint64) {
	t.Helper()
	if uint64(len(seen)) != to-from+1 {
		t.Fatalf("saw %d records, want %d..%d", len(seen), from, to)
	}
	for i, seq := range seen {
		if seq != from+uint64(i) {
			t.Fatalf("record %d is seq %d, want %d", i, seq, from+uint64(i))
		}
	}
}

// TestFollowReadsReleasedRecordsFromTheArchive: released segments move to
// the archive instead of being deleted, and Follow reads every durable
// record once, archived or not, before and after a restart.
func TestFollowReadsReleasedRecordsFromTheArchive(t *testing.T) {
	dir, opts := archiveOpts(t, 1<<30, time.Hour)
	s := openT(t, dir, opts)
	appendN(t, s, 1000)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	seen := followAll(t, s, 0, 300, 37)
	if err := s.Release(700); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Archived == 0 || st.ArchiveSegments != int(st.Archived) || st.Deleted != 0 || st.Oldest != 1 {
		t.Fatalf("after Release(700): %+v", st)
	}
	entries, _ := os.ReadDir(opts.ArchiveDir)
	if len(entries) != st.ArchiveSegments {
		t.Fatalf("archive holds %d files, stats say %d", len(entries), st.ArchiveSegments)
	}
	seen = append(seen, followAll(t, s, seen[len(seen)-1], 1000, 41)...)
	wantRun(t, seen, 1, 1000)

	// Read, the exporter's reader, still starts after the released mark.
	var first uint64
	s.Read(0, 1, func(seq uint64, _ []byte) error { first = seq; return nil })
	if first != 701 {
		t.Fatalf("Read(0) after Release(700) = %d", first)
	}

	s.Close()
	s = openT(t, dir, opts)
	replayAll(t, s)
	wantRun(t, followAll(t, s, 0, 1000, 1000), 1, 1000)
	wantRun(t, followAll(t, s, 555, 1000, 7), 556, 1000)
	if _, err := s.Follow(1001, 1, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrAhead) {
		t.Fatalf("Follow beyond durable = %v, want ErrAhead", err)
	}
	last, err := s.Follow(1000, 10, func(uint64, []byte) error { t.Fatal("a record past the end"); return nil })
	if err != nil || last != 1000 {
		t.Fatalf("Follow at the end = %d, %v", last, err)
	}
}

// TestArchiveBoundsDropOldSegments: the archive keeps at most its bytes
// and its age; a position before what it keeps is ErrExpired, and the
// bounds hold across a restart.
func TestArchiveBoundsDropOldSegments(t *testing.T) {
	dir, opts := archiveOpts(t, 3*4096, time.Hour)
	s := openT(t, dir, opts)
	appendN(t, s, 2000)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(1900); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Pruned == 0 || st.ArchiveBytes > opts.ArchiveMaxBytes || st.Oldest <= 1 {
		t.Fatalf("after Release(1900) with a 12 KiB archive: %+v", st)
	}
	if _, err := s.Follow(0, 1, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrExpired) {
		t.Fatalf("Follow from a pruned position = %v, want ErrExpired", err)
	}
	if _, err := s.Follow(st.Oldest-2, 1, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrExpired) {
		t.Fatalf("Follow from just before the oldest record's predecessor = %v, want ErrExpired", err)
	}
	wantRun(t, followAll(t, s, st.Oldest-1, 2000, 100), st.Oldest, 2000)

	// Age: the oldest kept segment's last write two hours ago.
	s.segMu.Lock()
	oldest := s.arc[0]
	s.segMu.Unlock()
	path := filepath.Join(opts.ArchiveDir, archiveName(oldest.first, oldest.last))
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir, opts) // the archive's times are read at Open
	replayAll(t, s)
	if n, err := s.PruneArchive(time.Now()); err != nil || n != 1 {
		t.Fatalf("PruneArchive of one expired segment = %d, %v", n, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("expired segment still there: %v", err)
	}
	if got := s.Oldest(); got != oldest.last+1 {
		t.Fatalf("Oldest after the age bound = %d, want %d", got, oldest.last+1)
	}
	if n, _ := s.PruneArchive(time.Now()); n != 0 {
		t.Fatalf("a second PruneArchive deleted %d more", n)
	}
}

// TestOpenFinishesAnInterruptedArchive: a Release that stored its mark and
// died before moving its segments leaves them to Open, which archives them
// (it does not delete them): nothing is missing from Follow.
func TestOpenFinishesAnInterruptedArchive(t *testing.T) {
	dir, opts := archiveOpts(t, 1<<30, time.Hour)
	s := openT(t, dir, opts)
	appendN(t, s, 1000)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	segs := len(segFiles(t, dir))
	s.crash()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeMark(dir, d, 800); err != nil { // the mark, and nothing after it
		t.Fatal(err)
	}
	d.Close()
	if len(segFiles(t, dir)) != segs {
		t.Fatal("the test's own mark moved segments")
	}

	s = openT(t, dir, opts)
	if got := len(segFiles(t, dir)); got >= segs {
		t.Fatalf("Open left all %d released segments in the spool", got)
	}
	st := s.Stats()
	if st.ArchiveSegments == 0 || st.Oldest != 1 || st.Released != 800 {
		t.Fatalf("after Open: %+v", st)
	}
	if seqs := replayAll(t, s); len(seqs) != 200 || seqs[0] != 801 {
		t.Fatalf("replay: %d records from %v", len(seqs), seqs[:1])
	}
	wantRun(t, followAll(t, s, 0, 1000, 64), 1, 1000)
}

// TestOpenPrunesArchivedSegmentsThatDoNotJoinUp: archived segments that
// are separated from the spool by a gap (the spool was rebuilt, say) are
// dropped at Open, loudly, rather than streamed with a silent hole.
func TestOpenPrunesArchivedSegmentsThatDoNotJoinUp(t *testing.T) {
	dir, opts := archiveOpts(t, 1<<30, time.Hour)
	s := openT(t, dir, opts)
	appendN(t, s, 1000)
	s.Sync()
	if err := s.Release(1000); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A stray segment far before the others, and a hole before the spool.
	if err := os.WriteFile(filepath.Join(opts.ArchiveDir, archiveName(1, 0)+"x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a foreign file in the archive = %v, want ErrCorrupt", err)
	}
	os.Remove(filepath.Join(opts.ArchiveDir, archiveName(1, 0)+"x"))
	entries, _ := os.ReadDir(opts.ArchiveDir)
	if len(entries) < 3 {
		t.Fatalf("only %d archived segments", len(entries))
	}
	// Remove the second one: the first no longer joins up.
	first, last, _ := parseArchiveName(entries[1].Name())
	if err := os.Remove(filepath.Join(opts.ArchiveDir, entries[1].Name())); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, opts)
	st := s.Stats()
	if st.Pruned != 1 || st.Oldest != last+1 || st.ArchiveSegments != len(entries)-2 {
		t.Fatalf("after a hole at %d-%d: %+v", first, last, st)
	}
	if _, err := s.Follow(0, 1, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrExpired) {
		t.Fatalf("Follow across the hole = %v, want ErrExpired", err)
	}
}

// TestFollowWhileReleasing: a follower reads while the spool appends,
// releases (archiving) and prunes: it sees every record once, in order,
// or is told its position expired — never a skip.
func TestFollowWhileReleasing(t *testing.T) {
	dir, opts := archiveOpts(t, 1<<30, time.Hour)
	s := openT(t, dir, opts)
	const total = 20000
	done := make(chan []uint64)
	go func() {
		var seen []uint64
		var after uint64
		for after < total {
			want := after + 1
			last, err := s.Follow(after, 333, func(seq uint64, p []byte) error {
				if seq != want {
					t.Errorf("seq %d, want %d", seq, want)
				}
				want++
				if err := checkPayload(seq, p); err != nil {
					t.Errorf("seq %d: %v", seq, err)
				}
				seen = append(seen, seq)
				return nil
			})
			if errors.Is(err, ErrExpired) {
				t.Errorf("the follower fell behind the archive: %v", err)
				break
			}
			if err != nil {
				t.Errorf("Follow: %v", err)
				break
			}
			after = last
		}
		done <- seen
	}()
	for n := uint64(0); n < total; n += 500 {
		appendN(t, s, 500)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(max(n, 1)); err != nil {
			t.Fatal(err)
		}
	}
	seen := <-done
	if !t.Failed() {
		wantRun(t, seen, 1, total)
	}
}

// TestFollowRemembersWhereAPageEnded: a Follow that ends because fn
// refused a record remembers that record's position, so the next Follow,
// which starts with it, does not rescan its segment from the start.
func TestFollowRemembersWhereAPageEnded(t *testing.T) {
	dir, opts := archiveOpts(t, 1<<30, time.Hour)
	opts.SegmentBytes = 1 << 20
	s := openT(t, dir, opts)
	appendN(t, s, 500)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("page full")
	n := 0
	last, err := s.Follow(0, 1000, func(uint64, []byte) error {
		if n == 300 {
			return stop
		}
		n++
		return nil
	})
	if !errors.Is(err, stop) || last != 300 {
		t.Fatalf("Follow = %d, %v", last, err)
	}
	h, ok := s.hints.near(1, 301)
	if !ok || h.seq != 301 {
		t.Fatalf("hint for 301: %+v %v", h, ok)
	}
	// The position is right: reading from it gives record 301.
	var f follower
	f.s = s
	defer f.done()
	p, err := f.payload(301)
	if err != nil || checkPayload(301, p) != nil {
		t.Fatalf("record 301 from the hint: %v", err)
	}
	if f.recOff != h.off {
		t.Fatalf("record 301 at %d, hint says %d", f.recOff, h.off)
	}
}
