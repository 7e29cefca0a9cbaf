package spool

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
)

// MaxReadRecords bounds one Read call, so that a caller's mistake cannot
// keep the read lock for an unbounded time.
const MaxReadRecords = 1 << 20

// Read calls fn for each durable, unreleased record with a sequence number
// above after, in order, at most limit (1 ≤ limit ≤ MaxReadRecords) of them.
// It returns the sequence number of the last record fn accepted, or after if
// there was none, so the caller can pass it back as the next after. The
// payload is only valid during fn. If fn returns an error Read stops and
// returns it unchanged. Records are read back from disk and their CRCs
// checked again; a mismatch is an error wrapping ErrCorrupt.
func (s *Spool) Read(after uint64, limit int, fn func(seq uint64, payload []byte) error) (last uint64, err error) {
	if limit < 1 || limit > MaxReadRecords || fn == nil {
		return after, fmt.Errorf("spool: Read limit %d not in [1, %d] or nil fn: %w", limit, MaxReadRecords, ErrArgument)
	}
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if s.isClosed() {
		return after, ErrClosed
	}
	return s.read(after, s.durable.Load(), limit, fn)
}

// Replay calls fn for every durable record that was not released, in
// sequence order: what a previous process appended and did not see
// exported. It must come before the first Append (ErrReplay otherwise). The
// payload is only valid during fn; an error from fn stops Replay and is
// returned unchanged.
func (s *Spool) Replay(fn func(seq uint64, payload []byte) error) error {
	if fn == nil {
		return fmt.Errorf("spool: Replay with nil fn: %w", ErrArgument)
	}
	s.mu.Lock()
	closed, started, upTo := s.closed, s.started, s.next-1
	s.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case started:
		return ErrReplay
	}
	s.readMu.Lock()
	defer s.readMu.Unlock()
	_, err := s.read(0, upTo, math.MaxInt, fn)
	return err
}

// read delivers records above max(after, released) and at most upTo.
// readMu is held.
func (s *Spool) read(after, upTo uint64, limit int, fn func(uint64, []byte) error) (uint64, error) {
	last := after
	seq := max(after, s.released.Load()) + 1
	for n := 0; n < limit && seq <= upTo; n++ {
		payload, err := s.rd.payload(s, seq)
		if err != nil {
			return last, err
		}
		if err := fn(seq, payload); err != nil {
			return last, err
		}
		last = seq
		seq++
	}
	return last, nil
}

// reader is a cursor into the segment files. Sequential reads (the
// exporter's) continue from the last offset; any other position is found by
// scanning its segment from the start.
type reader struct {
	f     *os.File
	cr    chunkReader
	first uint64 // first seq of the open segment
	limit uint64 // first seq of the segment after it; MaxUint64 if it was the last
	off   int64  // offset of record next
	next  uint64
}

// payload returns the payload of durable record seq.
func (r *reader) payload(s *Spool, seq uint64) ([]byte, error) {
	if r.f == nil || seq != r.next || seq >= r.limit {
		if err := r.seek(s, seq); err != nil {
			return nil, err
		}
	}
	h, rec, err := r.cr.record(r.off)
	if errors.Is(err, errShort) && r.limit == math.MaxUint64 {
		// The segment was the last when we opened it; it may have been
		// rolled (and trimmed of its zeros) since and seq be the first
		// record of the next one.
		if err := r.seek(s, seq); err != nil {
			return nil, err
		}
		h, rec, err = r.cr.record(r.off)
	}
	if err == nil && h.seq != seq {
		err = fmt.Errorf("record has seq %d, want %d", h.seq, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("spool: read %s offset %d: %w: %w", r.f.Name(), r.off, err, ErrCorrupt)
	}
	r.off += int64(len(rec))
	r.next++
	return rec[HeaderSize:], nil
}

// seek positions r at record seq: it opens the segment that holds seq and
// skips the records before it.
func (r *reader) seek(s *Spool, seq uint64) error {
	s.segMu.Lock()
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i] > seq }) - 1
	first, limit := uint64(0), uint64(math.MaxUint64)
	if i >= 0 {
		first = s.segs[i]
		if i+1 < len(s.segs) {
			limit = s.segs[i+1]
		}
	}
	s.segMu.Unlock()
	if i < 0 {
		return fmt.Errorf("spool: record %d is in no segment: %w", seq, ErrCorrupt)
	}
	if r.f == nil || r.first != first {
		r.close()
		f, err := os.Open(segPath(s.dir, first))
		if err != nil {
			return fmt.Errorf("spool: open segment for reading: %w", err)
		}
		r.f, r.first = f, first
		r.cr.reset(f)
		r.off, r.next = 0, first
	}
	r.limit = limit
	if seq < r.next {
		r.off, r.next = 0, first
	}
	for r.next < seq {
		h, rec, err := r.cr.record(r.off)
		if err == nil && h.seq != r.next {
			err = fmt.Errorf("record has seq %d, want %d", h.seq, r.next)
		}
		if err != nil {
			return fmt.Errorf("spool: read %s offset %d: %w: %w", r.f.Name(), r.off, err, ErrCorrupt)
		}
		r.off += int64(len(rec))
		r.next++
	}
	return nil
}

// close closes the open segment, if any.
func (r *reader) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}
