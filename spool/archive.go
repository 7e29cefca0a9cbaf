package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The archive keeps released segments for the billed-event stream (Follow)
// instead of deleting them. It is a directory of its own (Options.ArchiveDir,
// on the spool's filesystem: a segment moves there with one rename), holding
// nothing but segment files named by their first and last sequence numbers:
//
//	00000000000000000001-00000000000000052112.seg
//	00000000000000052113-00000000000000104800.seg
//
// Archived segments are never written again. They follow each other and the
// spool's first segment without a gap (Open checks this from the names and
// prunes what does not join up), so the stream is every record from the
// oldest archived one to Durable. The archive is bounded: the oldest
// segments are deleted while it holds more than ArchiveMaxBytes, and once
// a segment's last write (its modification time) is older than
// ArchiveMaxAge. A segment is the unit of retention.

// archived is one segment file in the archive.
type archived struct {
	first, last uint64
	size        int64
	mod         time.Time
}

// archiveName is the file name of an archived segment.
func archiveName(first, last uint64) string {
	return fmt.Sprintf("%0*d-%0*d%s", segDigits, first, segDigits, last, segSuffix)
}

// parseArchiveName returns the sequence numbers an archived segment's name
// carries; ok is false for names that are not archive names.
func parseArchiveName(name string) (first, last uint64, ok bool) {
	a, b, found := strings.Cut(strings.TrimSuffix(name, segSuffix), "-")
	if !found || !strings.HasSuffix(name, segSuffix) {
		return 0, 0, false
	}
	first, ok1 := parseDigits(a)
	last, ok2 := parseDigits(b)
	return first, last, ok1 && ok2 && first <= last
}

func parseDigits(s string) (uint64, bool) {
	if len(s) != segDigits {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n > 0
}

// archiveSegment moves the released segment first, whose last record is
// last, from dir into the archive. The caller syncs both directories.
func archiveSegment(dir, archive string, first, last uint64) (archived, error) {
	to := filepath.Join(archive, archiveName(first, last))
	if _, err := os.Lstat(to); !errors.Is(err, fs.ErrNotExist) {
		return archived{}, fmt.Errorf("spool: archive %s: exists already (or cannot be checked: %v): %w", to, err, ErrCorrupt)
	}
	if err := os.Rename(segPath(dir, first), to); err != nil {
		return archived{}, fmt.Errorf("spool: archive released segment: %w", err)
	}
	fi, err := os.Stat(to)
	if err != nil {
		return archived{}, fmt.Errorf("spool: archive released segment: %w", err)
	}
	return archived{first: first, last: last, size: fi.Size(), mod: fi.ModTime()}, nil
}

// loadArchive lists the archive directory (creating it if need be), in
// sequence order. Segments that do not join up with the ones after them
// and with the spool's first segment, next, cannot be streamed without a
// silent gap: they are deleted, and counted in the result's pruned.
func loadArchive(archive string, next uint64) (arc []archived, pruned int, err error) {
	if err := os.MkdirAll(archive, 0o700); err != nil {
		return nil, 0, fmt.Errorf("spool: archive: %w", err)
	}
	if err := syncDir(filepath.Dir(archive)); err != nil {
		return nil, 0, err
	}
	entries, err := os.ReadDir(archive)
	if err != nil {
		return nil, 0, fmt.Errorf("spool: list archive: %w", err)
	}
	for _, e := range entries {
		first, last, ok := parseArchiveName(e.Name())
		if !ok || !e.Type().IsRegular() {
			return nil, 0, fmt.Errorf("spool: %s: not an archived segment: %w", filepath.Join(archive, e.Name()), ErrCorrupt)
		}
		fi, err := e.Info()
		if err != nil {
			return nil, 0, fmt.Errorf("spool: archive: %w", err)
		}
		arc = append(arc, archived{first: first, last: last, size: fi.Size(), mod: fi.ModTime()})
	}
	slices.SortFunc(arc, func(a, b archived) int { return cmpUint(a.first, b.first) })
	// Keep the longest run that ends just before next.
	keep := len(arc)
	for keep > 0 && arc[keep-1].last+1 == next {
		next = arc[keep-1].first
		keep--
	}
	for _, a := range arc[:keep] {
		if err := os.Remove(filepath.Join(archive, archiveName(a.first, a.last))); err != nil {
			return nil, 0, fmt.Errorf("spool: prune archive: %w", err)
		}
	}
	return arc[keep:], keep, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// archiveReleased moves the released segments doomed out of the spool
// directory into the archive and syncs both directories. segMu is held:
// a reader finds each segment in the spool or in the archive, never
// neither. It returns how many it moved; those are no longer in s.segs.
func (s *Spool) archiveReleased(doomed []uint64) (int, error) {
	moved := 0
	var err error
	for i, first := range doomed {
		last := s.segs[i+1] - 1
		var a archived
		if a, err = archiveSegment(s.dir, s.opts.ArchiveDir, first, last); err != nil {
			break
		}
		s.arc = append(s.arc, a)
		moved++
	}
	s.segs = append(s.segs[:0], s.segs[moved:]...)
	return moved, err
}

// PruneArchive deletes the oldest archived segments while the archive is
// over ArchiveMaxBytes or they are older than ArchiveMaxAge. Release calls
// it; an idle spool's owner calls it now and then, so that age applies
// without traffic. It returns how many segments it deleted.
func (s *Spool) PruneArchive(now time.Time) (int, error) {
	if s.opts.ArchiveDir == "" {
		return 0, nil
	}
	s.segMu.Lock()
	var total int64
	for _, a := range s.arc {
		total += a.size
	}
	n := 0
	for n < len(s.arc) && (total > s.opts.ArchiveMaxBytes || now.Sub(s.arc[n].mod) > s.opts.ArchiveMaxAge) {
		total -= s.arc[n].size
		n++
	}
	victims := slices.Clone(s.arc[:n])
	s.arc = slices.Delete(s.arc, 0, n)
	s.segMu.Unlock()
	// A reader that has a victim open reads on; one that has not finds
	// its cursor below Oldest (ErrExpired).
	var errs []error
	for _, a := range victims {
		if err := os.Remove(filepath.Join(s.opts.ArchiveDir, archiveName(a.first, a.last))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("spool: prune archive: %w", err))
		}
	}
	s.stats.pruned.Add(uint64(n))
	return n, errors.Join(errs...)
}

// Oldest is the sequence number of the oldest record Follow can read: the
// first of the oldest archived segment, or of the spool's first segment.
func (s *Spool) Oldest() uint64 {
	s.segMu.Lock()
	defer s.segMu.Unlock()
	return s.oldestLocked()
}

func (s *Spool) oldestLocked() uint64 {
	if len(s.arc) > 0 {
		return s.arc[0].first
	}
	return s.segs[0]
}

// archiveBytes is the size of the archive's segments. segMu is held.
func (s *Spool) archiveBytesLocked() int64 {
	var total int64
	for _, a := range s.arc {
		total += a.size
	}
	return total
}
