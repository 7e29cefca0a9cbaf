package spool

import (
	"errors"
	"fmt"
	"os"
)

// scanResult is what scanning one segment found.
type scanResult struct {
	size int64  // file size
	end  int64  // offset just past the last good record
	free int64  // zero bytes after end, to the end of the file: the log's end, not damage
	next uint64 // sequence number the next record must carry
	// tailRecords counts the records a torn tail holds, whole or in part,
	// as far as their headers tell (see countTail).
	tailRecords uint64
}

// torn reports whether the segment has bytes after its last good record
// that are not all zero.
func (r scanResult) torn() bool { return r.end+r.free < r.size }

// scanSegment checks every record of the segment file at path, whose first
// record must carry first, and that records follow each other without gaps.
//
// In a segment that is not the last (last false) every byte must belong to a
// good record. In the last segment, the log ends at the first record
// boundary from which the rest of the file is zeros (res.free counts them):
// the flusher grows the segment with durable zeros ahead of its writes.
// Otherwise, bad bytes at the tail are a torn write:
// the result then has end < size and the caller truncates. They count as the
// tail only if no well-formed record with a plausible sequence number follows
// them (see findRecord); otherwise the segment is corrupt in the middle and
// scanSegment fails rather than drop what may be acknowledged records.
func scanSegment(path string, first uint64, last bool) (scanResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return scanResult{}, fmt.Errorf("spool: scan: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return scanResult{}, fmt.Errorf("spool: scan: %w", err)
	}
	var r chunkReader
	r.reset(f)
	res := scanResult{size: fi.Size(), next: first}
	for res.end < res.size {
		h, rec, err := r.record(res.end)
		if err == nil && h.seq != res.next {
			// A record whose CRC checks is no torn write: it was written
			// whole, with the wrong sequence number.
			return res, fmt.Errorf("spool: %s: offset %d: record has seq %d, want %d: %w",
				path, res.end, h.seq, res.next, ErrCorrupt)
		}
		if err == nil {
			res.end += int64(len(rec))
			res.next++
			continue
		}
		if !badRecord(err) {
			return res, fmt.Errorf("spool: %s: offset %d: %w", path, res.end, err)
		}
		if last {
			zero, zerr := zeroTail(&r, res.end, res.size)
			if zerr != nil {
				return res, fmt.Errorf("spool: %s: %w", path, zerr)
			}
			if zero {
				res.free = res.size - res.end
				return res, nil
			}
		}
		if !last {
			return res, fmt.Errorf("spool: %s: offset %d (seq %d): %w: %w", path, res.end, res.next, err, ErrCorrupt)
		}
		at, found, ferr := findRecord(&r, res.end+1, res.size, res.next)
		if ferr != nil {
			return res, fmt.Errorf("spool: %s: %w", path, ferr)
		}
		if found {
			return res, fmt.Errorf("spool: %s: offset %d (seq %d): %w, but a good record follows at offset %d: %w",
				path, res.end, res.next, err, at, ErrCorrupt)
		}
		if res.tailRecords, err = countTail(&r, res.end, res.size, res.next); err != nil {
			return res, fmt.Errorf("spool: %s: %w", path, err)
		}
		return res, nil
	}
	return res, nil
}

// findRecord looks for a well-formed record starting anywhere in
// [from, size) whose sequence number is at least next and small enough to
// fit in the bytes after from (each record takes at least HeaderSize bytes).
// The bound on the sequence number makes a false match need a 32-bit CRC
// collision at an offset that already looks like a header, and keeps the
// CRC work small: most offsets are rejected on the header alone.
func findRecord(r *chunkReader, from, size int64, next uint64) (int64, bool, error) {
	maxSeq := next + uint64(size-from)/HeaderSize
	for off := from; off+HeaderSize <= size; off++ {
		hb, err := r.at(off, HeaderSize)
		if err != nil {
			if errors.Is(err, errShort) {
				return 0, false, nil
			}
			return 0, false, err
		}
		h := decodeHeader(hb)
		if h.length > MaxPayload || h.seq < next || h.seq > maxSeq || off+int64(h.recordLen()) > size {
			continue
		}
		if _, _, err := r.record(off); err == nil {
			return off, true, nil
		} else if !errors.Is(err, errCRC) && !errors.Is(err, errShort) {
			return 0, false, err
		}
	}
	return 0, false, nil
}

// countTail counts the records a bad tail [from, size) holds, whole or cut
// short: it follows headers that carry the expected sequence numbers and a
// plausible length, and stops at the first that does not, or at a header
// the file ends inside. The bytes after that are not recognisable as
// records: zeros a crash left, or damage. So the count is what the tail
// shows, a lower bound: a truncation that removed whole records leaves no
// trace of them in the file.
func countTail(r *chunkReader, from, size int64, next uint64) (uint64, error) {
	n := uint64(0)
	for off := from; off+HeaderSize <= size; {
		hb, err := r.at(off, HeaderSize)
		if errors.Is(err, errShort) {
			break
		}
		if err != nil {
			return 0, err
		}
		h := decodeHeader(hb)
		if h.seq != next+n || h.length > MaxPayload {
			break
		}
		n++
		off += int64(h.recordLen())
	}
	return n, nil
}
