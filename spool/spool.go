package spool

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Errors. Append returns ErrTooLarge, ErrFull and ErrClosed unwrapped, so
// that rejecting a record costs no allocation; everything else wraps one of
// these (or an os error) with context.
var (
	ErrTooLarge   = errors.New("spool: payload larger than MaxPayload")
	ErrFull       = errors.New("spool: MaxPendingBytes not yet durable")
	ErrClosed     = errors.New("spool: closed")
	ErrLocked     = errors.New("spool: directory in use by another spool")
	ErrCorrupt    = errors.New("spool: corrupt")
	ErrBroken     = errors.New("spool: write or sync failed; nothing more will become durable")
	ErrOptions    = errors.New("spool: invalid options")
	ErrArgument   = errors.New("spool: invalid argument")
	ErrReplay     = errors.New("spool: Replay after Append")
	ErrNotDurable = errors.New("spool: release beyond the durable records")
)

// Spool is an open spool directory. Append, Durable, Read, Release, Sync,
// Stats and Close are safe to call from any goroutine; the intended use is
// one appender, one exporter (Read, Release) and the spool's own flusher.
type Spool struct {
	dir     string
	opts    Options
	lock    *os.File
	dirFile *os.File

	// mu guards the append state below. Append holds it to copy one record
	// and compute its CRC, the flusher to swap buffers: neither does I/O
	// under it, so Append never waits for the disk.
	mu       sync.Mutex
	cond     sync.Cond // on mu: durable advanced, err set, or flusher exited
	buf      pending   // encoded records not yet taken by the flusher
	inflight int       // bytes of the batch the flusher is writing
	next     uint64    // sequence number the next Append assigns
	taken    uint64    // highest sequence number the flusher has taken
	started  bool      // an Append succeeded: Replay is refused from now on
	closed   bool
	exited   bool  // the flusher has returned
	blocked  bool  // the batch being written found no room on the filesystem
	err      error // sticky flusher failure, wraps ErrBroken (or ErrNoSpace, at Close)

	health atomic.Uint32             // a Health, stored by the flusher under mu
	fault  atomic.Pointer[DiskFault] // tests: fails the flusher's writes and syncs

	durable  atomic.Uint64 // every record ≤ durable is on disk
	released atomic.Uint64 // every record ≤ released was exported

	wake    chan struct{} // cap 1: buf went from empty to non-empty
	urge    chan struct{} // cap 1: flush now (batch full, Sync, Close)
	done    chan struct{} // closed when the flusher returns
	abandon atomic.Bool   // tests: the flusher returns without flushing, as in a crash

	// Owned by the flusher goroutine (and by Close after it has returned).
	seg       *os.File  // the last segment, open for writing
	segSize   int64     // bytes its records take: where the next record goes
	segAlloc  int64     // its file size; segSize..segAlloc are durable zeros
	lastStart time.Time // when the last flush started
	batch     [][]byte  // chunks being written; reused
	calm      int       // batches in a row no larger than MaxBatchBytes
	// The batch being written: its bytes (0: none), its last record, how
	// far it is written; whether the segment holds writes not yet synced.
	batchBytes int
	batchLast  uint64
	pos        batchPos
	unsynced   bool
	// Short of space: when the flusher next tries to reserve room or to
	// write the batch that found none, and how long it waited last.
	retryAt   time.Time
	retryWait time.Duration

	// segMu guards segs: the first sequence numbers of the segment files on
	// disk, in order. The last one is the segment being written. It also
	// guards arc, the archived segments (archive.go), in order; each
	// segment is in exactly one of the two.
	segMu sync.Mutex
	segs  []uint64
	arc   []archived
	hints hints // where recent Follow calls ended

	relMu sync.Mutex // serialises Release (and Close against it)

	dropped Dropped // what Open cut from a torn tail; set before the flusher starts, then read-only
	owner   string  // the label SetOwner stored (owner.go); guarded by mu

	readMu sync.Mutex // serialises Read and Replay; guards rd
	rd     reader

	stats counters
}

// Open opens (creating if needed, with mode 0700) the spool in dir, takes
// an exclusive lock on it, recovers it (see the package documentation) and
// starts the flusher. Call Replay before the first Append to get the records
// that were durable and not released.
func Open(dir string, opts Options) (*Spool, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, fmt.Errorf("spool: empty directory name: %w", ErrArgument)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	dirFile, err := os.Open(dir)
	if err != nil {
		unlockDir(lock)
		return nil, fmt.Errorf("spool: open dir: %w", err)
	}
	var arc []archived
	owner, err := readOwner(dir)
	if err != nil {
		dirFile.Close()
		unlockDir(lock)
		return nil, err
	}
	rec, err := recoverDir(dir, dirFile, opts.ArchiveDir)
	if err == nil && opts.ArchiveDir != "" {
		var pruned int
		if arc, pruned, err = loadArchive(opts.ArchiveDir, rec.segs[0]); err == nil {
			rec.archivePruned = pruned
			err = syncDir(opts.ArchiveDir)
		}
	}
	if err != nil {
		if rec.active != nil {
			rec.active.Close()
		}
		dirFile.Close()
		unlockDir(lock)
		return nil, err
	}
	s := &Spool{
		dir:      dir,
		opts:     opts,
		lock:     lock,
		dirFile:  dirFile,
		buf:      newPending(opts.MaxPendingBytes),
		batch:    make([][]byte, 0, maxChunks(opts.MaxPendingBytes)),
		next:     rec.next,
		wake:     make(chan struct{}, 1),
		urge:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		seg:      rec.active,
		segSize:  rec.size,
		segAlloc: rec.alloc,
		segs:     rec.segs,
		arc:      arc,
		owner:    owner,
	}
	s.cond.L = &s.mu
	s.durable.Store(rec.next - 1)
	s.released.Store(rec.released)
	s.dropped = rec.dropped
	s.stats.truncated.Store(rec.dropped.Bytes)
	s.stats.pruned.Store(uint64(rec.archivePruned))
	go s.run()
	return s, nil
}

// Dropped describes the torn or damaged tail Open cut from the last
// segment; zero Bytes if there was none.
func (s *Spool) Dropped() Dropped { return s.dropped }

// Append copies payload into the spool and returns its sequence number. It
// never waits for the disk: the record becomes durable when a later flush
// completes (see Durable, OnDurable, Sync). It returns ErrTooLarge for a
// payload over MaxPayload, ErrFull when MaxPendingBytes are already waiting
// for the disk (retry after Durable advances), ErrClosed after Close, and
// an error wrapping ErrBroken once a write or sync has failed.
func (s *Spool) Append(payload []byte) (uint64, error) {
	if len(payload) > MaxPayload {
		return 0, ErrTooLarge
	}
	n := HeaderSize + len(payload)
	s.mu.Lock()
	if s.closed || s.err != nil {
		err := s.err
		s.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		return 0, err
	}
	before := s.buf.bytes
	if before+s.inflight+n > s.opts.MaxPendingBytes {
		s.mu.Unlock()
		s.stats.full.Add(1)
		return 0, ErrFull
	}
	seq := s.next
	encodeRecord(s.buf.reserve(n), seq, payload)
	s.next++
	s.started = true
	// Tokens are posted under mu, where the flusher also drains them when
	// it takes the pending records, so a token always stands for records
	// the flusher has not taken yet. Posting never blocks.
	if before == 0 {
		poke(s.wake)
	}
	if b := s.opts.MaxBatchBytes; before < b && before+n >= b {
		poke(s.urge)
	}
	s.mu.Unlock()
	return seq, nil
}

// poke leaves a token in a one-slot channel without ever blocking: one token
// is as good as many to a flusher that takes everything pending.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// drain removes the token from a one-slot channel, if there is one.
func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// Durable returns the highest sequence number known to be on disk; every
// record at or below it is durable.
func (s *Spool) Durable() uint64 { return s.durable.Load() }

// Sync starts a flush at once and waits until every record appended before
// the call is durable. While a batch waits for room on the filesystem it
// returns ErrNoSpace instead of waiting (after asking the flusher to try
// again): a full disk may stay full for hours.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	target := s.next - 1
	if (target > s.taken || s.blocked) && s.err == nil {
		poke(s.urge) // records the flusher has not taken, or a retry: start now
	}
	for s.durable.Load() < target && s.err == nil && !s.exited && !s.blocked {
		s.cond.Wait()
	}
	switch {
	case s.err != nil:
		return s.err
	case s.durable.Load() >= target:
		return nil
	case s.blocked:
		return ErrNoSpace
	}
	return ErrClosed
}

// Close flushes and syncs everything appended, stops the flusher, closes
// the files and releases the directory lock. It returns the flusher's error
// if a write or sync failed. Calls after the first return ErrClosed.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	poke(s.urge)
	s.mu.Unlock()
	<-s.done
	return s.closeFiles()
}

// closeFiles closes everything Open opened; the flusher has returned.
func (s *Spool) closeFiles() error {
	s.mu.Lock()
	errs := []error{s.err}
	s.mu.Unlock()
	if s.seg != nil && errs[0] == nil && !s.abandon.Load() {
		// A spool closed cleanly holds records only.
		errs = append(errs, s.trim())
	}
	if s.seg != nil {
		if err := s.seg.Close(); err != nil {
			errs = append(errs, fmt.Errorf("spool: close segment: %w", err))
		}
		s.seg = nil
	}
	s.readMu.Lock()
	s.rd.close()
	s.readMu.Unlock()
	s.relMu.Lock() // a Release in progress still uses dirFile
	if err := s.dirFile.Close(); err != nil {
		errs = append(errs, fmt.Errorf("spool: close dir: %w", err))
	}
	s.relMu.Unlock()
	errs = append(errs, unlockDir(s.lock))
	return errors.Join(errs...)
}

// isClosed reports whether Close has been called.
func (s *Spool) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
