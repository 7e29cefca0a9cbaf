package spool

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// Release records that every record ≤ upTo has been exported: they will not
// be read or replayed again. It persists the mark first (atomically, see
// the package documentation) and then deletes the segment files that hold
// only released records; a crash in between leaves files that Open deletes.
// The segment being written is never deleted. upTo may not exceed Durable
// (ErrNotDurable); releasing at or below the current mark does nothing.
//
// Each call that moves the mark costs two fsyncs, so an exporter should
// release once per exported batch, not per record.
func (s *Spool) Release(upTo uint64) error {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	if d := s.durable.Load(); upTo > d {
		return fmt.Errorf("spool: release %d, durable %d: %w", upTo, d, ErrNotDurable)
	}
	if upTo <= s.released.Load() {
		return nil
	}
	if err := writeMark(s.dir, s.dirFile, upTo); err != nil {
		return err
	}
	s.released.Store(upTo)

	// Segment i holds records segs[i] .. segs[i+1]-1.
	s.segMu.Lock()
	k := 0
	for k+1 < len(s.segs) && s.segs[k+1]-1 <= upTo {
		k++
	}
	doomed := append([]uint64(nil), s.segs[:k]...)
	if s.opts.ArchiveDir != "" {
		moved, err := s.archiveReleased(doomed)
		s.segMu.Unlock()
		return s.afterArchive(moved, err)
	}
	s.segs = append(s.segs[:0], s.segs[k:]...)
	s.segMu.Unlock()

	var errs []error
	for _, first := range doomed {
		if err := os.Remove(segPath(s.dir, first)); err != nil {
			errs = append(errs, fmt.Errorf("spool: remove released segment: %w", err))
		}
	}
	s.stats.deleted.Add(uint64(len(doomed) - len(errs)))
	// No directory fsync: if a removal is lost in a crash, Open removes the
	// file again, because the mark is durable.
	return errors.Join(errs...)
}

// afterArchive finishes a Release that moved moved segments into the
// archive: it makes the moves durable and applies the archive's bounds. A
// move lost in a crash is redone by Open, because the mark is durable.
func (s *Spool) afterArchive(moved int, err error) error {
	errs := []error{err}
	if moved > 0 {
		s.stats.archived.Add(uint64(moved))
		errs = append(errs, syncDir(s.opts.ArchiveDir))
		if err := s.dirFile.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("spool: sync dir: %w", err))
		}
		_, perr := s.PruneArchive(time.Now())
		errs = append(errs, perr)
	}
	return errors.Join(errs...)
}
