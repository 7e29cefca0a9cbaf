package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
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
//
// Short of space (NoSpace) it also wakes on its retry schedule: to write
// again the batch that found no room, or, when none did, to try to reserve
// the next grow step. While a batch waits for room new records wait behind
// it; only the schedule, Sync and Close make it try again.
func (s *Spool) run() {
	defer s.exit()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		urgent, retried := false, false
		wake := s.wake
		if s.batchBytes > 0 {
			wake = nil
		}
		var retryC <-chan time.Time
		if s.Health() == NoSpace {
			retry.Reset(max(time.Until(s.retryAt), 0))
			retryC = retry.C
		}
		select {
		case <-wake:
		case <-s.urge:
			urgent = true
		case <-retryC:
			urgent, retried = true, true
			s.retryDue(time.Now()) // the try after this one waits longer
		}
		retry.Stop() // Go 1.23 timers: no stale tick is received after Stop
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
		if retried && s.batchBytes == 0 {
			if err := s.reserve(); err != nil {
				s.fail(err)
				return
			}
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

// flush writes and syncs a batch — the one that last found no room, if
// any, else everything pending — then publishes the new durable mark. It
// reports whether the flusher should return: the spool is closed and
// empty, or broken, or closed with a batch that still finds no room.
func (s *Spool) flush() (stop bool) {
	if s.batchBytes == 0 {
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
		s.batchBytes = s.buf.bytes
		s.inflight = s.batchBytes
		s.batch = s.buf.takeAll(s.batch)
		s.batchLast = s.next - 1 // the batch holds every record up to here
		s.taken = s.batchLast
		// Every token posted so far asked for records this batch holds.
		drain(s.wake)
		drain(s.urge)
		s.mu.Unlock()
		s.pos = batchPos{}
	}

	s.lastStart = time.Now()
	err := s.write()
	if errors.Is(err, errNoRoom) {
		s.setHealth(NoSpace)
		s.setBlocked(true)
		if !s.isClosed() {
			return false // written again on the retry schedule
		}
		err = fmt.Errorf("%w: records up to %d stay unwritten at close", ErrNoSpace, s.batchLast)
	} else if err == nil && s.Health() == NoSpace && !s.lowOnZeros(s.segSize) {
		// A batch that had waited went in, with zeros enough after it
		// (or, without growing ahead, a write is the only sign of room).
		s.setHealth(Healthy)
	}
	size, last := s.batchBytes, s.batchLast
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
	s.batchBytes = 0
	s.blocked = false
	broke := false
	switch {
	case errors.Is(err, ErrNoSpace):
		s.err = err
	case err != nil:
		broke = s.breakLocked(err)
	default:
		s.durable.Store(last)
	}
	s.cond.Broadcast()
	stop = err != nil || (s.closed && s.buf.bytes == 0)
	s.mu.Unlock()
	if broke {
		s.announce(Broken)
	}
	return stop
}

// fail makes a failure outside a batch (reserving room) permanent.
func (s *Spool) fail(err error) {
	s.mu.Lock()
	broke := s.breakLocked(err)
	s.mu.Unlock()
	if broke {
		s.announce(Broken)
	}
}

// setBlocked records whether a batch waits for room; Sync answers
// ErrNoSpace rather than wait while one does.
func (s *Spool) setBlocked(b bool) {
	s.mu.Lock()
	s.blocked = b
	s.cond.Broadcast()
	s.mu.Unlock()
}

// batchPos is how far the flusher has written the batch: the chunk, and
// the bytes of it already in a segment.
type batchPos struct{ chunk, off int }

// write puts the chunks of the batch, runs of whole encoded records, into
// the segment files at the end of their records and syncs them, rolling to
// a new segment whenever the current one has reached SegmentBytes. A
// segment is synced and trimmed before the next is created, so the last
// segment is the only one that can hold a torn tail or zeros.
//
// Records go into zeros that grow made durable beforehand, so the file size
// does not change and the fdatasync writes no inode. grow runs here, when a
// batch would not fit or would leave less than half a step of zeros, not
// ahead of time in another goroutine: a step is about 1 ms once per
// GrowBytes (BENCHMARKS.md), and zeros written while the flusher syncs
// would be flushed by its sync.
//
// A write the filesystem refuses for want of space returns errNoRoom with
// the position kept: written again, the batch goes on from the record the
// refusal cut (its bytes are written again in the same place, so a part
// of it the refused write left behind is overwritten with the same bytes).
// After any other failed write or sync the file's state is unknown (Linux
// may drop the dirty pages and clear the error, so a retried fsync can
// succeed without the data), so the caller makes the failure permanent.
func (s *Spool) write() error {
	for ; s.pos.chunk < len(s.batch); s.pos.chunk, s.pos.off = s.pos.chunk+1, 0 {
		c := s.batch[s.pos.chunk]
		for s.pos.off < len(c) {
			rest := c[s.pos.off:]
			if s.seg == nil || s.segSize >= s.opts.SegmentBytes {
				if s.unsynced {
					if err := s.sync(); err != nil {
						return err
					}
				}
				if err := s.roll(binary.LittleEndian.Uint64(rest[8:])); err != nil {
					return err
				}
			}
			n := cut(rest, s.opts.SegmentBytes-s.segSize)
			if err := s.room(s.segSize + int64(n)); err != nil {
				return err
			}
			if _, err := s.writeAt(OpWrite, rest[:n], s.segSize); err != nil {
				if isNoSpace(err) {
					return errNoRoom
				}
				return fmt.Errorf("spool: write %s: %w", s.seg.Name(), err)
			}
			s.segSize += int64(n)
			s.segAlloc = max(s.segAlloc, s.segSize)
			s.unsynced = true
			s.pos.off += n
		}
	}
	if s.unsynced {
		return s.sync()
	}
	return nil
}

// room grows the segment when need bytes of records would not fit in its
// durable zeros, or would leave less than half a step of them: growing
// before the zeros run out is what finds a full filesystem while records
// already on their way still fit (the reserve). Short of space, it tries
// again only on the retry schedule while the reserve holds the records.
// It returns an error only for a failure that breaks the spool: a batch
// that finds no zeros and no room is refused by its write.
func (s *Spool) room(need int64) error {
	if s.opts.GrowBytes < 0 {
		return nil
	}
	short := need > s.segAlloc
	if !short && !s.lowOnZeros(need) {
		return nil
	}
	if !short && s.Health() == NoSpace && !s.retryDue(time.Now()) {
		return nil
	}
	switch err := s.grow(need); {
	case err == nil:
		s.setHealth(Healthy)
	case errors.Is(err, errNoRoom):
		s.setHealth(NoSpace)
	default:
		return err
	}
	return nil
}

// lowOnZeros reports whether records up to need would leave less than
// half a grow step of zeros in a segment that may still grow.
func (s *Spool) lowOnZeros(need int64) bool {
	return s.opts.GrowBytes >= 0 && s.segAlloc < s.opts.SegmentBytes && s.segAlloc-need < s.opts.GrowBytes/2
}

// reserve is the retry of a spool short of space with no batch waiting:
// it tries to grow the segment by a step, which ends NoSpace if it can.
func (s *Spool) reserve() error {
	if s.seg == nil || s.opts.GrowBytes < 0 || s.segAlloc >= s.opts.SegmentBytes {
		// Nothing to reserve in this segment; the next batch (or roll)
		// finds out for itself.
		s.setHealth(Healthy)
		return nil
	}
	switch err := s.grow(s.segSize); {
	case err == nil:
		s.setHealth(Healthy)
	case errors.Is(err, errNoRoom):
	default:
		return err
	}
	return nil
}

// grow extends the segment being written with zeros, by GrowBytes steps,
// until it holds at least need bytes and a step more than it had, and
// fdatasyncs them, so that records written into them later never change
// the file size. It grows no further than SegmentBytes (or need, past it),
// where the segment rolls. With GrowBytes negative it does nothing and the
// write extends the file.
//
// When the filesystem has no room for all of it, grow keeps (and syncs)
// the zeros it could write and returns errNoRoom: they are the reserve
// records already on their way go into.
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
	off := s.segAlloc
	var short error
	for off < target {
		n, err := s.writeAt(OpGrow, zeros[:min(target-off, int64(len(zeros)))], off)
		off += int64(n)
		if err != nil {
			if !isNoSpace(err) {
				return fmt.Errorf("spool: grow %s: %w", s.seg.Name(), err)
			}
			short = errNoRoom
			break
		}
	}
	if off > s.segAlloc {
		if err := s.datasync(); err != nil {
			return fmt.Errorf("spool: fdatasync %s after growing it: %w", s.seg.Name(), err)
		}
		s.stats.grows.Add(1)
		s.segAlloc = off
	}
	return short
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
	if err := s.datasync(); err != nil {
		return fmt.Errorf("spool: fdatasync %s: %w", s.seg.Name(), err)
	}
	s.unsynced = false
	s.stats.observeSync(time.Since(start))
	return nil
}

// writeAt writes b at off in the segment being written.
func (s *Spool) writeAt(op DiskOp, b []byte, off int64) (int, error) {
	if err := s.injected(op, off, int64(len(b))); err != nil {
		return 0, err
	}
	return s.seg.WriteAt(b, off)
}

// datasync fdatasyncs the segment being written.
func (s *Spool) datasync() error {
	if err := s.injected(OpSync, 0, 0); err != nil {
		return err
	}
	return datasync(s.seg)
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

// roll trims and closes the current segment (already synced), if it is
// still open, and makes a new one for the record first. A new segment the
// filesystem has no room for is errNoRoom, and the next try starts here.
func (s *Spool) roll(first uint64) error {
	if s.seg != nil {
		if err := s.trim(); err != nil {
			return err
		}
		err := s.seg.Close()
		s.seg = nil
		if err != nil {
			return fmt.Errorf("spool: close segment: %w", err)
		}
	}
	f, err := createSegment(s.dir, s.dirFile, first)
	if err != nil {
		var pe *os.PathError
		if isNoSpace(err) && errors.As(err, &pe) && pe.Op == "open" {
			return errNoRoom // not created: nothing is in doubt
		}
		return err
	}
	s.seg, s.segSize, s.segAlloc = f, 0, 0
	s.segMu.Lock()
	s.segs = append(s.segs, first)
	s.segMu.Unlock()
	s.stats.rolls.Add(1)
	return nil
}
