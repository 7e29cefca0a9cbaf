package spool

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// SyncBuckets is the number of buckets in Stats.SyncHist.
const SyncBuckets = 24

// Stats is a snapshot of a spool's counters. Fields are read one at a time,
// so a snapshot taken while the spool runs is not one instant, but every
// counter only grows and released ≤ durable ≤ appended holds between the
// three marks as read.
type Stats struct {
	Appended uint64 // highest sequence number assigned (0: none)
	Durable  uint64 // highest sequence number on disk
	Released uint64 // highest sequence number released

	PendingBytes int // appended, not yet durable (waiting plus being written)
	Segments     int // segment files on disk

	Flushes      uint64 // batches written
	FlushedBytes uint64 // bytes written by those batches
	Syncs        uint64 // fdatasync calls by the flusher (a roll adds one)
	Rolls        uint64 // segments created by the flusher
	Grows        uint64 // steps of zeros the flusher grew segments by (each one more fdatasync, not in Syncs)
	Deleted      uint64 // segments deleted by Release
	Full         uint64 // Appends refused with ErrFull
	NoSpace      uint64 // times the spool became short of space (Health NoSpace)
	Health       Health // as the flusher last found it
	Truncated    int64  // bytes cut from a torn tail when the spool was opened
	// DroppedRecords counts the records those bytes held, whole or in
	// part, as far as their headers tell (Dropped has the details).
	DroppedRecords uint64

	SyncTotal time.Duration // time spent in fdatasync
	SyncMax   time.Duration // longest fdatasync
	// SyncHist[i] counts fdatasyncs that took less than 2^i µs (and at least
	// 2^(i-1) µs); the last bucket also holds everything longer.
	SyncHist [SyncBuckets]uint64

	// The archive (Options.ArchiveDir): segments Release moved there,
	// segments its bounds deleted, what it holds now, and the oldest
	// record Follow can read.
	Archived, Pruned uint64
	ArchiveSegments  int
	ArchiveBytes     int64
	Oldest           uint64
}

// MeanSync is the mean fdatasync time, 0 if there was none.
func (st Stats) MeanSync() time.Duration {
	if st.Syncs == 0 {
		return 0
	}
	return st.SyncTotal / time.Duration(st.Syncs)
}

// counters are the flusher's and Release's counters. Each is written by one
// goroutine at a time and read by Stats from any, hence atomics.
type counters struct {
	flushes      atomic.Uint64
	flushedBytes atomic.Uint64
	syncs        atomic.Uint64
	rolls        atomic.Uint64
	grows        atomic.Uint64
	deleted      atomic.Uint64
	archived     atomic.Uint64
	pruned       atomic.Uint64
	full         atomic.Uint64
	noSpace      atomic.Uint64
	truncated    atomic.Int64
	syncNanos    atomic.Int64
	syncMax      atomic.Int64
	syncHist     [SyncBuckets]atomic.Uint64
}

// observeSync records one fdatasync of duration d. Only the flusher calls it.
func (c *counters) observeSync(d time.Duration) {
	c.syncs.Add(1)
	c.syncNanos.Add(int64(d))
	if int64(d) > c.syncMax.Load() {
		c.syncMax.Store(int64(d))
	}
	c.syncHist[syncBucket(d)].Add(1)
}

// syncBucket is the SyncHist index for a duration d: the number of bits of
// d in whole microseconds, capped at the last bucket.
func syncBucket(d time.Duration) int {
	us := max(d.Microseconds(), 0)
	return min(bits.Len64(uint64(us)), SyncBuckets-1)
}

// Stats returns a snapshot of the spool's counters.
func (s *Spool) Stats() Stats {
	var st Stats
	// Read in this order so the snapshot keeps released ≤ durable ≤
	// appended: each only grows, and each is at most the next at any instant.
	st.Released = s.released.Load()
	st.Durable = s.durable.Load()
	s.mu.Lock()
	st.Appended = s.next - 1
	st.PendingBytes = s.buf.bytes + s.inflight
	s.mu.Unlock()
	s.segMu.Lock()
	st.Segments = len(s.segs)
	st.ArchiveSegments = len(s.arc)
	st.ArchiveBytes = s.archiveBytesLocked()
	st.Oldest = s.oldestLocked()
	s.segMu.Unlock()
	st.Archived = s.stats.archived.Load()
	st.Pruned = s.stats.pruned.Load()

	c := &s.stats
	st.Flushes = c.flushes.Load()
	st.FlushedBytes = c.flushedBytes.Load()
	st.Syncs = c.syncs.Load()
	st.Rolls = c.rolls.Load()
	st.Grows = c.grows.Load()
	st.Deleted = c.deleted.Load()
	st.Full = c.full.Load()
	st.NoSpace = c.noSpace.Load()
	st.Health = s.Health()
	st.Truncated = c.truncated.Load()
	st.DroppedRecords = s.dropped.Records
	st.SyncTotal = time.Duration(c.syncNanos.Load())
	st.SyncMax = time.Duration(c.syncMax.Load())
	for i := range st.SyncHist {
		st.SyncHist[i] = c.syncHist[i].Load()
	}
	return st
}
