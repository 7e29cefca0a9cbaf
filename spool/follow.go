package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Errors of Follow's position.
var (
	ErrExpired = errors.New("spool: the records after this position are no longer kept")
	ErrAhead   = errors.New("spool: position beyond the durable records")
)

// Follow calls fn for each durable record with a sequence number above
// after, archived (Options.ArchiveDir) or still in the spool, released or
// not, in order, at most limit (1 ≤ limit ≤ MaxReadRecords) of them. It
// returns the sequence number of the last record fn accepted, or after if
// there was none. The payload is only valid during fn; an error from fn
// stops Follow and is returned unchanged.
//
// after must be at least Oldest()-1 (ErrExpired otherwise: the archive's
// bounds deleted records after it) and at most Durable (ErrAhead). Sequence
// numbers never change and durable records stay until the archive drops
// them, so a caller that passes back what Follow returned sees every record
// once, across restarts and crashes. Follow has its own files and cursor:
// it does not disturb Read, and any number may run at once.
func (s *Spool) Follow(after uint64, limit int, fn func(seq uint64, payload []byte) error) (uint64, error) {
	if limit < 1 || limit > MaxReadRecords || fn == nil {
		return after, fmt.Errorf("spool: Follow limit %d not in [1, %d] or nil fn: %w", limit, MaxReadRecords, ErrArgument)
	}
	if s.isClosed() {
		return after, ErrClosed
	}
	durable := s.durable.Load()
	if after > durable {
		return after, fmt.Errorf("spool: position %d, durable %d: %w", after, durable, ErrAhead)
	}
	if oldest := s.Oldest(); after+1 < oldest {
		return after, fmt.Errorf("spool: position %d, oldest record kept %d: %w", after, oldest, ErrExpired)
	}
	f := follower{s: s}
	defer f.done()
	last := after
	for seq := after + 1; seq <= durable && seq-after <= uint64(limit); seq++ {
		payload, err := f.payload(seq)
		if err != nil {
			return last, err
		}
		if err := fn(seq, payload); err != nil {
			// seq was not accepted: the next Follow starts with it.
			f.s.hints.put(hint{first: f.first, seq: seq, off: f.recOff})
			return last, err
		}
		last = seq
	}
	f.remember()
	return last, nil
}

// follower is one Follow call's cursor into a segment, spool or archived.
type follower struct {
	s     *Spool
	f     *os.File
	cr    *chunkReader
	first uint64 // first seq of the open segment
	limit uint64 // first seq after it; MaxUint64 for the spool's last segment
	off   int64  // offset of record next
	next  uint64
	// recOff is where the record payload last returned starts.
	recOff int64
}

// payload returns the payload of durable record seq, which is next or the
// first record Follow asks for.
func (f *follower) payload(seq uint64) ([]byte, error) {
	if f.f == nil || seq != f.next || seq >= f.limit {
		if err := f.seek(seq); err != nil {
			return nil, err
		}
	}
	h, rec, err := f.cr.record(f.off)
	if errors.Is(err, errShort) && f.limit == math.MaxUint64 {
		// The spool's last segment when opened; it may have rolled (and
		// been trimmed of its zeros) since.
		if err := f.seek(seq); err != nil {
			return nil, err
		}
		h, rec, err = f.cr.record(f.off)
	}
	if err == nil && h.seq != seq {
		err = fmt.Errorf("record has seq %d, want %d", h.seq, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("spool: follow %s offset %d: %w: %w", f.f.Name(), f.off, err, ErrCorrupt)
	}
	f.recOff = f.off
	f.off += int64(len(rec))
	f.next++
	return rec[HeaderSize:], nil
}

// seek opens the segment that holds seq and positions f at it, starting
// from the nearest position a previous Follow remembered.
func (f *follower) seek(seq uint64) error {
	// A segment moves from the spool to the archive, or is pruned, between
	// looking it up and opening it: look again.
	for attempt := 0; ; attempt++ {
		path, first, limit, err := f.s.locate(seq)
		if err != nil {
			return err
		}
		if f.f != nil && f.first == first {
			f.limit = limit
			break
		}
		file, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
			continue
		}
		if err != nil {
			return fmt.Errorf("spool: open segment to follow: %w", err)
		}
		f.closeFile()
		if f.cr == nil {
			f.cr = chunkReaders.Get().(*chunkReader)
		}
		f.f, f.first, f.limit = file, first, limit
		f.cr.reset(file)
		f.off, f.next = 0, first
		break
	}
	if seq < f.next {
		f.off, f.next = 0, f.first
	}
	if h, ok := f.s.hints.near(f.first, seq); ok && h.seq > f.next {
		f.off, f.next = h.off, h.seq
	}
	for f.next < seq {
		h, rec, err := f.cr.record(f.off)
		if err == nil && h.seq != f.next {
			err = fmt.Errorf("record has seq %d, want %d", h.seq, f.next)
		}
		if err != nil {
			return fmt.Errorf("spool: follow %s offset %d: %w: %w", f.f.Name(), f.off, err, ErrCorrupt)
		}
		f.off += int64(len(rec))
		f.next++
	}
	return nil
}

// remember keeps f's position for the next Follow, which most likely
// continues from it.
func (f *follower) remember() {
	if f.f != nil {
		f.s.hints.put(hint{first: f.first, seq: f.next, off: f.off})
	}
}

func (f *follower) closeFile() {
	if f.f != nil {
		f.f.Close()
		f.f = nil
	}
}

// done closes f's file and recycles its buffer.
func (f *follower) done() {
	f.closeFile()
	if f.cr != nil {
		f.cr.f = nil
		chunkReaders.Put(f.cr)
		f.cr = nil
	}
}

// chunkReaders recycles Follow's read buffers (chunkSize each).
var chunkReaders = sync.Pool{New: func() any { return new(chunkReader) }}

// locate finds the file that holds record seq: its path, its first record
// and the first record after it (MaxUint64 if it is the spool's last).
func (s *Spool) locate(seq uint64) (path string, first, limit uint64, err error) {
	s.segMu.Lock()
	defer s.segMu.Unlock()
	if seq < s.oldestLocked() {
		return "", 0, 0, fmt.Errorf("spool: record %d: %w", seq, ErrExpired)
	}
	if n := len(s.arc); n > 0 && seq <= s.arc[n-1].last {
		i := sort.Search(n, func(i int) bool { return s.arc[i].last >= seq })
		a := s.arc[i]
		return filepath.Join(s.opts.ArchiveDir, archiveName(a.first, a.last)), a.first, a.last + 1, nil
	}
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i] > seq }) - 1
	if i < 0 {
		return "", 0, 0, fmt.Errorf("spool: record %d is in no segment: %w", seq, ErrCorrupt)
	}
	limit = math.MaxUint64
	if i+1 < len(s.segs) {
		limit = s.segs[i+1]
	}
	return segPath(s.dir, s.segs[i]), s.segs[i], limit, nil
}

// hint is a position Follow reached: record seq starts at off in the
// segment whose first record is first.
type hint struct {
	first, seq uint64
	off        int64
}

// hints remembers the last few positions Follow calls ended at, so that a
// consumer paging through a large segment does not rescan it from the
// start each page. Bounded: the oldest is overwritten.
type hints struct {
	mu   sync.Mutex
	h    [16]hint
	next int
}

func (hs *hints) put(h hint) {
	hs.mu.Lock()
	hs.h[hs.next] = h
	hs.next = (hs.next + 1) % len(hs.h)
	hs.mu.Unlock()
}

// near returns the remembered position in segment first closest below or
// at seq.
func (hs *hints) near(first, seq uint64) (hint, bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var best hint
	found := false
	for _, h := range hs.h {
		if h.first == first && h.seq != 0 && h.seq <= seq && (!found || h.seq > best.seq) {
			best, found = h, true
		}
	}
	return best, found
}
