package spool

import (
	"fmt"
	"time"
)

// Defaults for the zero Options fields.
const (
	DefaultSegmentBytes    = 64 << 20
	DefaultFlushInterval   = 2 * time.Millisecond
	DefaultMaxBatchBytes   = 1 << 20
	DefaultMaxPendingBytes = 64 << 20
	DefaultGrowBytes       = 1 << 20
)

// Limits that Open enforces, so that a mistyped option fails loudly instead
// of becoming a multi-gigabyte buffer or a flusher that never runs.
const (
	MaxSegmentBytes    = 1 << 40
	MaxFlushInterval   = time.Second
	MaxPendingLimit    = 1 << 30
	MaxGrowBytes       = 1 << 30
	minMaxPendingBytes = maxRecord // one largest record must always fit
)

// Options configures a Spool. The zero value of every field means its default.
type Options struct {
	// SegmentBytes is the size past which the flusher rolls to a new segment
	// file. Segments are the unit Release deletes, so smaller segments free
	// disk sooner at the price of more files. Default 64 MiB.
	SegmentBytes int64

	// FlushInterval is the group-commit period: the flusher starts at most
	// one flush per interval, so a flush starts at most FlushInterval after
	// the record that makes it necessary (sooner if the flusher was idle for
	// that long) and a busy spool pays one fdatasync per interval rather than
	// one per record. A flush also starts at once when MaxBatchBytes are
	// pending, and on Sync and Close. Negative means no wait: flush whenever
	// anything is pending (pure group commit). Default 2 ms.
	FlushInterval time.Duration

	// MaxBatchBytes of pending records start a flush before FlushInterval has
	// passed. Default 1 MiB.
	MaxBatchBytes int

	// MaxPendingBytes bounds the records that are in memory and not yet
	// durable (waiting, plus the batch being written). Append returns
	// ErrFull rather than exceed it: the caller sees backpressure instead of
	// the process growing without bound when the disk stalls. It also
	// bounds memory: records are buffered in chunks of 4×(HeaderSize +
	// MaxPayload) bytes that are at least three quarters full when sealed,
	// so at most 4/3×MaxPendingBytes plus a few chunks (about the size of
	// MaxPendingBytes with small records), kept for reuse until traffic has
	// been calm for a while. Default 64 MiB.
	MaxPendingBytes int

	// GrowBytes is the step by which the flusher extends the segment it
	// writes with zeros, written and fdatasync'd before records go into
	// them. Records then overwrite durable zeros in place and the file size
	// stays put, so the fdatasync of a batch writes the data alone, not the
	// inode too: about half the CPU and latency of a sync that grows the
	// file (BENCHMARKS.md). A step costs one write of zeros and one extra
	// fdatasync on the flusher (about 1 ms for 1 MiB), taken when a batch
	// would not fit. A rolled segment is trimmed to its records. Negative
	// means no growing ahead: every batch extends the file, as a
	// copy-on-write filesystem (where overwriting in place saves nothing)
	// may prefer. Default 1 MiB.
	GrowBytes int64

	// OnDurable, if set, is called by the flusher after every record with a
	// sequence number ≤ seq is durable, in increasing seq order, and before
	// Durable and Sync report seq. It runs on the flusher goroutine, which
	// writes nothing while it runs, so it must not block long, and must not
	// call Sync or Close (they wait for the flusher).
	OnDurable func(seq uint64)

	// OnHealth, if set, is called by the flusher each time the spool's
	// Health changes: short of space, room again, broken. It runs on the
	// flusher goroutine, like OnDurable, with the same restrictions.
	OnHealth func(h Health)

	// ArchiveDir, if set, is where Release moves the segments it would
	// delete, for Follow (archive.go). It must be on the spool's
	// filesystem (a segment moves with one rename) and belongs to this
	// spool alone. "" deletes released segments.
	ArchiveDir string
	// ArchiveMaxBytes and ArchiveMaxAge bound the archive: its oldest
	// segments are deleted while it holds more bytes, and once their last
	// write is older. Both are required (positive) with ArchiveDir. A
	// segment is the unit: the archive holds whole segments of up to
	// SegmentBytes plus one record.
	ArchiveMaxBytes int64
	ArchiveMaxAge   time.Duration
}

// withDefaults returns o with zero fields defaulted, or an error naming the
// first field out of bounds.
func (o Options) withDefaults() (Options, error) {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.FlushInterval < 0 {
		o.FlushInterval = 0
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxPendingBytes == 0 {
		o.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if o.GrowBytes == 0 {
		o.GrowBytes = DefaultGrowBytes
	}
	if o.GrowBytes < 0 {
		o.GrowBytes = -1
	}
	switch {
	case o.SegmentBytes < 0 || o.SegmentBytes > MaxSegmentBytes:
		return o, fmt.Errorf("spool: SegmentBytes %d not in [1, %d]: %w", o.SegmentBytes, int64(MaxSegmentBytes), ErrOptions)
	case o.FlushInterval > MaxFlushInterval:
		return o, fmt.Errorf("spool: FlushInterval %v above %v: %w", o.FlushInterval, MaxFlushInterval, ErrOptions)
	case o.MaxPendingBytes < minMaxPendingBytes || o.MaxPendingBytes > MaxPendingLimit:
		return o, fmt.Errorf("spool: MaxPendingBytes %d not in [%d, %d]: %w", o.MaxPendingBytes, minMaxPendingBytes, MaxPendingLimit, ErrOptions)
	case o.MaxBatchBytes < 0 || o.MaxBatchBytes > o.MaxPendingBytes:
		return o, fmt.Errorf("spool: MaxBatchBytes %d not in [1, MaxPendingBytes=%d]: %w", o.MaxBatchBytes, o.MaxPendingBytes, ErrOptions)
	case o.GrowBytes > MaxGrowBytes:
		return o, fmt.Errorf("spool: GrowBytes %d above %d: %w", o.GrowBytes, int64(MaxGrowBytes), ErrOptions)
	case o.ArchiveDir != "" && (o.ArchiveMaxBytes <= 0 || o.ArchiveMaxAge <= 0):
		return o, fmt.Errorf("spool: ArchiveMaxBytes %d and ArchiveMaxAge %v must be positive with ArchiveDir: %w", o.ArchiveMaxBytes, o.ArchiveMaxAge, ErrOptions)
	}
	return o, nil
}
