package spool

import (
	"errors"
	"fmt"
	"os"
)

// scanResult is what scanning one segment found.
type scanResult struct {
	size int64 // file size
	end  int64 // offset just past the last good record
	free int64 // zero bytes after end, to the end of the file: the log's end, not damage
	// dirty is the offset just past the last byte of a torn tail that is
	// not zero: what the cut removes that is more than the grown zeros.
	dirty int64
	next  uint64 // sequence number the next record must carry
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
			last, torn, terr := unsyncedBatch(&r, res.end, at, res.size, res.next)
			if terr != nil {
				return res, fmt.Errorf("spool: %s: %w", path, terr)
			}
			if !torn {
				return res, fmt.Errorf("spool: %s: offset %d (seq %d): %w, but a good record follows at offset %d: %w",
					path, res.end, res.next, err, at, ErrCorrupt)
			}
			res.tailRecords = last + 1 - res.next
		} else if res.tailRecords, err = countTail(&r, res.end, res.size, res.next); err != nil {
			return res, fmt.Errorf("spool: %s: %w", path, err)
		}
		if res.dirty, err = dirtyEnd(&r, res.end, res.size); err != nil {
			return res, fmt.Errorf("spool: %s: %w", path, err)
		}
		return res, nil
	}
	return res, nil
}

// maxUnsyncedBatch bounds how far past the last good record the records of
// a batch whose fdatasync never finished may lie (unsyncedBatch): a batch
// is normally at most MaxBatchBytes (1 MiB by default); one that a stall
// let grow past this is judged corrupt, as any other damage.
const maxUnsyncedBatch = 4 << 20

// pageSize is the unit a disk may persist or lose on its own.
const pageSize = 4096

// unsyncedBatch reports whether the bytes of the last segment from end on
// are what a crash during a batch's fdatasync may leave when the batch
// went into grown zeros: the disk wrote some of the batch's pages and not
// others, so a gap (zeros, or a torn record) lies before whole records.
// None of them was acknowledged — an answer waits for the whole batch's
// sync — so they are a torn tail, cut like any other. It holds when the
// gap starts with zeros to the end of its page, the records from at on
// carry consecutive sequence numbers from at least next, no other record
// follows them, and they end within
// maxUnsyncedBatch of end; it returns the last one's sequence number.
// Anything else is damage to records that may have been acknowledged.
func unsyncedBatch(r *chunkReader, end, at, size int64, next uint64) (last uint64, torn bool, err error) {
	// A lost page of the batch reads as the zeros it held before; the page
	// holding end had the last synced record's bytes and then zeros. So
	// the gap starts with zeros to the end of that page: damage to a
	// record that was there (a flipped bit, a bad length) does not.
	if zero, zerr := zeroTail(r, end, min(at, (end/pageSize+1)*pageSize)); zerr != nil || !zero {
		return 0, false, zerr
	}
	off := at
	for {
		h, _, rerr := r.record(off)
		if rerr != nil {
			if !badRecord(rerr) {
				return 0, false, rerr
			}
			break
		}
		if last != 0 && h.seq != last+1 || h.seq < next {
			return 0, false, nil
		}
		last = h.seq
		off += int64(h.recordLen())
	}
	if off-end > maxUnsyncedBatch {
		return 0, false, nil
	}
	if _, found, ferr := findRecord(r, off+1, size, last+1); ferr != nil || found {
		return 0, false, ferr
	}
	return last, true, nil
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
