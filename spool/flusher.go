package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"syscall"
	"time"
)

// calmRuns is how many batches in a row no larger than MaxBatchBytes let the
// flusher free the extra chunks a stall made it allocate (about 0.5 s of
// steady traffic at the default interval).
const calmRuns = 256

// run is the flusher goroutine: it waits for pending records, lets a batch
// gather for what is left of the group-commit period, and flushes. It
// returns after Close once nothing is pending, or at once when the spool has
// failed or is abandoned.
//
// Timing: a flush starts when records are pending and FlushInterval has
// passed since the previous flush started, or at once on urge (MaxBatchBytes
// pending, Sync, Close). So an idle spool flushes a lone record immediately,
// and a busy one does one write and one fdatasync per period; records that
// arrive during a flush wait for the next.
func (s *Spool) run() {
	defer s.exit()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		urgent := false
		select {
		case <-s.wake:
		case <-s.urge:
			urgent = true
		}
		if !urgent && s.opts.FlushInterval > 0 {
			if d := time.Until(s.lastStart.Add(s.opts.FlushInterval)); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-s.urge:
					timer.Stop()
				}
			}
		}
		if s.abandon.Load() {
			return
		}
		if s.flush() {
			return
		}
	}
}

// exit marks the flusher gone and wakes everyone waiting on it.
func (s *Spool) exit() {
	s.mu.Lock()
	s.exited = true
	s.cond.Broadcast()
	s.mu.Unlock()
	close(s.done)
}

// flush writes and syncs everything pending, then publishes the new durable
// mark. It reports whether the flusher should return: the spool is closed
// and empty, or broken.
func (s *Spool) flush() (stop bool) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return true
	}
	if s.buf.bytes == 0 {
		stop = s.closed
		s.mu.Unlock()
		return stop
	}
	size := s.buf.bytes
	s.inflight = size
	s.batch = s.buf.takeAll(s.batch)
	last := s.next - 1 // the batch holds every record up to here
	s.taken = last
	// Every token posted so far asked for records this batch holds.
	drain(s.wake)
	drain(s.urge)
	s.mu.Unlock()

	s.lastStart = time.Now()
	err := s.write(s.batch)
	s.stats.flushes.Add(1)
	s.stats.flushedBytes.Add(uint64(size))
	// A stall can leave many chunks behind; give them back only after
	// calmRuns ordinary batches in a row, so that a saturated spool does not
	// free and reallocate its chunks over and over.
	if size <= s.opts.MaxBatchBytes {
		s.calm = min(s.calm+1, calmRuns)
	} else {
		s.calm = 0
	}
	keep := math.MaxInt
	if s.calm == calmRuns {
		keep = keepFree
	}

	// OnDurable runs before Durable and Sync report the batch, so a caller
	// that sees a record durable either way knows OnDurable has seen it.
	if err == nil && s.opts.OnDurable != nil {
		s.opts.OnDurable(last)
	}

	s.mu.Lock()
	s.buf.recycle(s.batch, keep)
	s.inflight = 0
	if err != nil {
		s.err = fmt.Errorf("%w: %w", ErrBroken, err)
	} else {
		s.durable.Store(last)
	}
	s.cond.Broadcast()
	stop = err != nil || (s.closed && s.buf.bytes == 0)
	s.mu.Unlock()
	return stop
}

// write puts the chunks of a batch, runs of whole encoded records, into
// the segment files at the end of their records and syncs them, rolling to
// a new segment whenever the current one has reached SegmentBytes. A
// segment is synced and trimmed before the next is created, so the last
// segment is the only one that can hold a torn tail or zeros.
//
// Records go into zeros that grow made durable beforehand, so the file size
// does not change and the fdatasync writes no inode. grow runs here, when a
// batch would not fit, not ahead of time in another goroutine: a step is
// about 1 ms once per GrowBytes (BENCHMARKS.md), and zeros written while the
// flusher syncs would be flushed by its sync.
//
// After a failed write or sync the file's state is unknown (Linux may drop
// the dirty pages and clear the error, so a retried fsync can succeed
// without the data), so the caller makes the failure permanent.
func (s *Spool) write(batch [][]byte) error {
	dirty := false
	for _, c := range batch {
		for len(c) > 0 {
			if s.segSize >= s.opts.SegmentBytes {
				if dirty {
					if err := s.sync(); err != nil {
						return err
					}
					dirty = false
				}
				if err := s.roll(binary.LittleEndian.Uint64(c[8:])); err != nil {
					return err
				}
			}
			n := cut(c, s.opts.SegmentBytes-s.segSize)
			if end := s.segSize + int64(n); end > s.segAlloc {
				if err := s.grow(end); err != nil {
					return err
				}
			}
			if _, err := s.seg.WriteAt(c[:n], s.segSize); err != nil {
				return fmt.Errorf("spool: write %s: %w", s.seg.Name(), err)
			}
			s.segSize += int64(n)
			s.segAlloc = max(s.segAlloc, s.segSize)
			dirty = true
			c = c[n:]
		}
	}
	if dirty {
		return s.sync()
	}
	return nil
}

// grow extends the segment being written with zeros, by GrowBytes steps,
// until it holds at least need bytes, and fdatasyncs them, so that records
// written into them later never change the file size. It grows no further
// than SegmentBytes (or need, past it), where the segment rolls. With
// GrowBytes negative it does nothing and the write extends the file.
func (s *Spool) grow(need int64) error {
	step := s.opts.GrowBytes
	if step < 0 {
		return nil
	}
	target := s.segAlloc + step
	if target < need {
		target += (need - target + step - 1) / step * step
	}
	target = min(target, max(need, s.opts.SegmentBytes))
	for off := s.segAlloc; off < target; {
		n := min(target-off, int64(len(zeros)))
		if _, err := s.seg.WriteAt(zeros[:n], off); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				// No room for a whole step: the batch may still fit. It
				// extends the file as without growing (zeros this wrote
				// lie past the records, where they end the log); the
				// spool breaks only if the batch itself does not fit.
				return nil
			}
			return fmt.Errorf("spool: grow %s: %w", s.seg.Name(), err)
		}
		off += n
	}
	if err := datasync(s.seg); err != nil {
		return fmt.Errorf("spool: fdatasync %s after growing it: %w", s.seg.Name(), err)
	}
	s.stats.grows.Add(1)
	s.segAlloc = target
	return nil
}

// trim cuts the zeros past the records of the segment being written, whose
// records are synced, and makes the new size durable: a rolled segment, and
// the last one of a spool closed cleanly, hold records only.
func (s *Spool) trim() error {
	if s.segAlloc <= s.segSize {
		return nil
	}
	if err := s.seg.Truncate(s.segSize); err != nil {
		return fmt.Errorf("spool: trim %s to %d: %w", s.seg.Name(), s.segSize, err)
	}
	if err := s.seg.Sync(); err != nil {
		return fmt.Errorf("spool: fsync %s after trimming it: %w", s.seg.Name(), err)
	}
	s.segAlloc = s.segSize
	return nil
}

// sync fdatasyncs the segment being written and times it.
func (s *Spool) sync() error {
	start := time.Now()
	if err := datasync(s.seg); err != nil {
		return fmt.Errorf("spool: fdatasync %s: %w", s.seg.Name(), err)
	}
	s.stats.observeSync(time.Since(start))
	return nil
}

// cut returns how many leading bytes of batch go into a segment with room
// bytes left before SegmentBytes: every record that starts before the limit,
// so at least one, and a segment ends past the limit by less than a record.
func cut(batch []byte, room int64) int {
	if int64(len(batch)) <= room {
		return len(batch)
	}
	off := 0
	for off < len(batch) && (off == 0 || int64(off) < room) {
		off += HeaderSize + int(binary.LittleEndian.Uint32(batch[off:]))
	}
	return off
}

// roll trims and closes the current segment (already synced) and makes a
// new one for the record first.
func (s *Spool) roll(first uint64) error {
	if err := s.trim(); err != nil {
		return err
	}
	if err := s.seg.Close(); err != nil {
		s.seg = nil
		return fmt.Errorf("spool: close segment: %w", err)
	}
	s.seg = nil
	f, err := createSegment(s.dir, s.dirFile, first)
	if err != nil {
		return err
	}
	s.seg, s.segSize, s.segAlloc = f, 0, 0
	s.segMu.Lock()
	s.segs = append(s.segs, first)
	s.segMu.Unlock()
	s.stats.rolls.Add(1)
	return nil
}
