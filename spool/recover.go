package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// recovered is the state Open starts from.
type recovered struct {
	released  uint64
	segs      []uint64 // first seqs of the segments on disk, in order; never empty
	active    *os.File // the last segment, open for appending, fdatasync'd
	size      int64    // its size
	next      uint64   // sequence number of the next record
	truncated int64    // bytes cut from a torn tail
}

// recoverDir brings the spool directory to a consistent state: it drops
// segments that hold only released records, checks every record of the
// rest, truncates a torn tail of the last segment, makes sure a last segment
// exists, and makes all of it durable. dirFile is the open directory.
func recoverDir(dir string, dirFile *os.File) (rec recovered, err error) {
	if rec.released, err = readMark(dir); err != nil {
		return rec, err
	}
	// A leftover temp mark is a Release that crashed before its rename; the
	// old mark stands.
	if err := os.Remove(filepath.Join(dir, markTmpName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("spool: remove temp mark: %w", err)
	}
	firsts, err := listSegments(dir)
	if err != nil {
		return rec, err
	}
	// Release persists the mark before it deletes segments, so a crash in
	// between leaves segments that hold only released records: finish the
	// job. The last segment is kept, it is where appends continue.
	for len(firsts) > 1 && firsts[1]-1 <= rec.released {
		if err := os.Remove(segPath(dir, firsts[0])); err != nil {
			return rec, fmt.Errorf("spool: remove released segment: %w", err)
		}
		firsts = firsts[1:]
	}
	if len(firsts) == 0 {
		err := createFirstSegment(dir, dirFile, &rec)
		return rec, err
	}
	if firsts[0] > rec.released+1 {
		return rec, fmt.Errorf("spool: %s: first segment starts at seq %d but only records ≤ %d were released: %w",
			segPath(dir, firsts[0]), firsts[0], rec.released, ErrCorrupt)
	}

	next := firsts[0]
	var tail scanResult
	for i, first := range firsts {
		path := segPath(dir, first)
		if first != next {
			return rec, fmt.Errorf("spool: %s: segment starts at seq %d, want %d (sequence gap): %w", path, first, next, ErrCorrupt)
		}
		res, err := scanSegment(path, first, i == len(firsts)-1)
		if err != nil {
			return rec, err
		}
		next, tail = res.next, res
	}
	if rec.released >= next {
		return rec, fmt.Errorf("spool: released mark %d beyond the last record %d: %w", rec.released, next-1, ErrCorrupt)
	}

	lastPath := segPath(dir, firsts[len(firsts)-1])
	f, err := os.OpenFile(lastPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return rec, fmt.Errorf("spool: open last segment: %w", err)
	}
	if tail.torn() {
		if err := f.Truncate(tail.end); err != nil {
			f.Close()
			return rec, fmt.Errorf("spool: truncate torn tail of %s at %d: %w", lastPath, tail.end, err)
		}
	}
	// Records a killed process left in the page cache are on disk only once
	// synced; Open reports them durable, so sync before saying so.
	if err := datasync(f); err != nil {
		f.Close()
		return rec, fmt.Errorf("spool: sync %s: %w", lastPath, err)
	}
	if err := dirFile.Sync(); err != nil {
		f.Close()
		return rec, fmt.Errorf("spool: sync dir: %w", err)
	}
	rec.segs, rec.active, rec.size, rec.next = firsts, f, tail.end, next
	rec.truncated = tail.size - tail.end
	return rec, nil
}

// createFirstSegment creates the (empty) segment that the record after the
// released mark will go to, in a directory that has none.
func createFirstSegment(dir string, dirFile *os.File, rec *recovered) error {
	first := rec.released + 1
	f, err := createSegment(dir, dirFile, first)
	if err != nil {
		return err
	}
	rec.segs, rec.active, rec.size, rec.next = []uint64{first}, f, 0, first
	return nil
}

// createSegment creates a new, empty segment file and fsyncs the directory,
// so that records written to it and synced cannot vanish with the name.
func createSegment(dir string, dirFile *os.File, first uint64) (*os.File, error) {
	path := segPath(dir, first)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: create segment: %w", err)
	}
	if err := dirFile.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool: sync dir after creating %s: %w", path, err)
	}
	return f, nil
}
