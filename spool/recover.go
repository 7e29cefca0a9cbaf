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
	released uint64
	segs     []uint64 // first seqs of the segments on disk, in order; never empty
	active   *os.File // the last segment, open for writing, fdatasync'd
	size     int64    // the bytes its records take: where writing continues
	alloc    int64    // its file size: records, then durable zeros
	next     uint64   // sequence number of the next record
	dropped  Dropped  // the torn tail cut from the last segment, if any
	// archivePruned counts archived segments deleted because they did
	// not join up with the spool (loadArchive).
	archivePruned int
}

// Dropped describes a torn or damaged tail that Open cut from the last
// segment. Records is what the cut bytes show (see countTail): a write a
// crash cut short held no acknowledged record, but a tail damaged or
// truncated after the fact may have held many, and only the first of those
// can show.
type Dropped struct {
	File     string // the segment
	Offset   int64  // where it was cut: just past its last good record
	Bytes    int64  // bytes cut
	Records  uint64 // records the bytes held, whole or in part, as far as their headers tell
	FirstSeq uint64 // sequence number the first record cut carried (or would have)
}

// recoveryPlan is what Open will do to a spool directory, found without
// changing anything: Verify reports it, recoverDir carries it out.
type recoveryPlan struct {
	released uint64
	doomed   []uint64 // segments holding only released records: to delete
	firsts   []uint64 // the segments that stay, in order
	tail     scanResult
	next     uint64 // sequence number of the next record
}

// lastPath is the path of the segment appends continue in; "" if none.
func (p *recoveryPlan) lastPath(dir string) string {
	if len(p.firsts) == 0 {
		return ""
	}
	return segPath(dir, p.firsts[len(p.firsts)-1])
}

// dropped describes the torn tail the plan cuts; zero if none.
func (p *recoveryPlan) dropped(dir string) Dropped {
	if !p.tail.torn() {
		return Dropped{}
	}
	return Dropped{File: p.lastPath(dir), Offset: p.tail.end, Bytes: p.tail.dirty - p.tail.end,
		Records: p.tail.tailRecords, FirstSeq: p.tail.next}
}

// planRecovery checks every record of the segments that hold unreleased
// records, without changing anything, and returns what Open must do: the
// released-only segments to delete, and the torn tail of the last segment
// to cut. Damage anywhere else, or a gap in the sequence, is an error
// naming the file (and offset) that wraps ErrCorrupt.
func planRecovery(dir string) (plan recoveryPlan, err error) {
	if plan.released, err = readMark(dir); err != nil {
		return plan, err
	}
	firsts, err := listSegments(dir)
	if err != nil {
		return plan, err
	}
	// Release persists the mark before it deletes segments, so a crash in
	// between leaves segments that hold only released records: finish the
	// job. The last segment is kept, it is where appends continue.
	for len(firsts) > 1 && firsts[1]-1 <= plan.released {
		plan.doomed = append(plan.doomed, firsts[0])
		firsts = firsts[1:]
	}
	plan.firsts = firsts
	if len(firsts) == 0 {
		plan.next = plan.released + 1
		return plan, nil
	}
	if firsts[0] > plan.released+1 {
		return plan, fmt.Errorf("spool: %s: first segment starts at seq %d but only records ≤ %d were released: %w",
			segPath(dir, firsts[0]), firsts[0], plan.released, ErrCorrupt)
	}
	next := firsts[0]
	for i, first := range firsts {
		path := segPath(dir, first)
		if first != next {
			return plan, fmt.Errorf("spool: %s: segment starts at seq %d, want %d (sequence gap): %w", path, first, next, ErrCorrupt)
		}
		res, err := scanSegment(path, first, i == len(firsts)-1)
		if err != nil {
			return plan, err
		}
		next, plan.tail = res.next, res
	}
	if plan.released >= next {
		return plan, fmt.Errorf("spool: released mark %d beyond the last record %d: %w", plan.released, next-1, ErrCorrupt)
	}
	plan.next = next
	return plan, nil
}

// recoverDir brings the spool directory to a consistent state: it drops
// segments that hold only released records (into archive, unless that is
// ""), checks every record of the rest, truncates a torn tail of the last
// segment, makes sure a last segment exists, and makes all of it durable.
// dirFile is the open directory.
func recoverDir(dir string, dirFile *os.File, archive string) (rec recovered, err error) {
	plan, err := planRecovery(dir)
	if err != nil {
		return rec, err
	}
	rec.released = plan.released
	// A leftover temp mark is a Release that crashed before its rename; the
	// old mark stands.
	if err := os.Remove(filepath.Join(dir, markTmpName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("spool: remove temp mark: %w", err)
	}
	for i, first := range plan.doomed {
		if archive != "" {
			// Release archived segments up to here and crashed before it
			// moved this one: finish its work the way it would have.
			next := plan.released + 1
			if i+1 < len(plan.doomed) {
				next = plan.doomed[i+1]
			} else if len(plan.firsts) > 0 {
				next = plan.firsts[0]
			}
			if _, err := archiveSegment(dir, archive, first, next-1); err != nil {
				return rec, err
			}
			continue
		}
		if err := os.Remove(segPath(dir, first)); err != nil {
			return rec, fmt.Errorf("spool: remove released segment: %w", err)
		}
	}
	if len(plan.firsts) == 0 {
		err := createFirstSegment(dir, dirFile, &rec)
		return rec, err
	}

	lastPath := plan.lastPath(dir)
	f, err := os.OpenFile(lastPath, os.O_WRONLY, 0)
	if err != nil {
		return rec, fmt.Errorf("spool: open last segment: %w", err)
	}
	if plan.tail.torn() {
		if err := f.Truncate(plan.tail.end); err != nil {
			f.Close()
			return rec, fmt.Errorf("spool: truncate torn tail of %s at %d: %w", lastPath, plan.tail.end, err)
		}
	}
	alloc := plan.tail.size // zeros past the records stay: the flusher writes into them
	if plan.tail.torn() {
		alloc = plan.tail.end
	}
	// Records a killed process left in the page cache are on disk only once
	// synced; Open reports them durable, so sync before saying so. The sync
	// also makes the zeros after them durable, if the process grew the
	// segment and died before its own sync: the flusher writes records
	// only into durable zeros.
	if err := datasync(f); err != nil {
		f.Close()
		return rec, fmt.Errorf("spool: sync %s: %w", lastPath, err)
	}
	if err := dirFile.Sync(); err != nil {
		f.Close()
		return rec, fmt.Errorf("spool: sync dir: %w", err)
	}
	rec.segs, rec.active, rec.size, rec.alloc, rec.next = plan.firsts, f, plan.tail.end, alloc, plan.next
	rec.dropped = plan.dropped(dir)
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
	rec.segs, rec.active, rec.size, rec.alloc, rec.next = []uint64{first}, f, 0, 0, first
	return nil
}

// createSegment creates a new, empty segment file and fsyncs the directory,
// so that records written to it and synced cannot vanish with the name.
func createSegment(dir string, dirFile *os.File, first uint64) (*os.File, error) {
	path := segPath(dir, first)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: create segment: %w", err)
	}
	if err := dirFile.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool: sync dir after creating %s: %w", path, err)
	}
	return f, nil
}
