package spool

import (
	"bytes"
	"errors"
	"io"
	"os"
)

// chunkSize is how much a chunkReader reads per system call. It must hold
// the largest record, so that any record can be returned as one slice.
const chunkSize = 256 << 10

// Reasons a record cannot be decoded at an offset. They are not wrapped in
// ErrCorrupt here: whether a bad record is corruption or a torn tail is the
// caller's decision.
var (
	errShort  = errors.New("file ends inside the record")
	errLength = errors.New("length field above MaxPayload")
	errCRC    = errors.New("CRC mismatch")
	// errZero is an all-zero header: no record was written there (yet).
	// At a record boundary of the last segment, followed by zeros only, it
	// is the end of the log (see zeroTail); anywhere else it is damage.
	errZero = errors.New("all-zero header")
)

// badRecord reports whether err says the bytes at an offset are no record
// (as opposed to an I/O error).
func badRecord(err error) bool {
	return errors.Is(err, errShort) || errors.Is(err, errLength) || errors.Is(err, errCRC) || errors.Is(err, errZero)
}

// zeros is a block of zero bytes to compare with and to grow segments from.
// Never written.
var zeros [chunkSize]byte

// chunkReader reads records from a segment file with positioned reads of
// chunkSize, so scanning costs one system call per chunk, not per record.
// It never assumes the file stops growing: a request beyond the bytes it
// holds re-reads from the requested offset. Records once in a segment never
// change, but the zeros the flusher grew the last segment by do: a record
// that does not decode from buffered bytes is read again from the file
// before it is reported bad (record).
type chunkReader struct {
	f    *os.File
	buf  []byte
	base int64 // file offset of buf[0]
	n    int   // bytes of buf that hold file data
}

// reset points r at f and forgets what it had buffered.
func (r *chunkReader) reset(f *os.File) {
	if r.buf == nil {
		r.buf = make([]byte, chunkSize)
	}
	r.f, r.base, r.n = f, 0, 0
}

// at returns the n bytes at offset off (n ≤ chunkSize). The slice is valid
// until the next call. It returns errShort if the file ends first.
func (r *chunkReader) at(off int64, n int) ([]byte, error) {
	if off >= r.base && off+int64(n) <= r.base+int64(r.n) {
		i := int(off - r.base)
		return r.buf[i : i+n], nil
	}
	m, err := r.f.ReadAt(r.buf, off)
	r.base, r.n = off, m
	if m >= n {
		return r.buf[:n], nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return nil, errShort
	}
	return nil, err
}

// record decodes and checks the record at off and returns its header and
// its bytes (header and payload). The sequence number is not checked.
func (r *chunkReader) record(off int64) (header, []byte, error) {
	h, rec, err := r.decode(off)
	if err != nil {
		// Buffered bytes may be zeros, or a write in progress, that the
		// flusher has since overwritten with records: judge the file. Only
		// bad records pay for the second reading, and they are rare.
		r.n = 0
		h, rec, err = r.decode(off)
	}
	return h, rec, err
}

// decode is record without the second reading.
func (r *chunkReader) decode(off int64) (header, []byte, error) {
	hb, err := r.at(off, HeaderSize)
	if err != nil {
		return header{}, nil, err
	}
	if allZero(hb) {
		return header{}, nil, errZero
	}
	h := decodeHeader(hb)
	if h.length > MaxPayload {
		return h, nil, errLength
	}
	rec, err := r.at(off, h.recordLen())
	if err != nil {
		return h, nil, err
	}
	if !h.valid(rec) {
		return h, nil, errCRC
	}
	return h, rec, nil
}

// zeroTail reports whether the bytes [from, size) of r's file are all
// zero: in the last segment, from a record boundary, that is the space the
// flusher grew the segment by and has not written records into, and the
// log ends at from. Read fresh from the file, not from the buffer.
func zeroTail(r *chunkReader, from, size int64) (bool, error) {
	r.n = 0
	for off := from; off < size; {
		n := int(min(size-off, chunkSize))
		b, err := r.at(off, n)
		if err != nil {
			return false, err
		}
		if !allZero(b) {
			return false, nil
		}
		off += int64(n)
	}
	return true, nil
}

// dirtyEnd is the offset just past the last byte of [from, size) that is
// not zero (from if there is none): how much of a torn tail is damage, not
// the zeros the flusher grew the segment with.
func dirtyEnd(r *chunkReader, from, size int64) (int64, error) {
	r.n = 0
	end := from
	for off := from; off < size; {
		n := int(min(size-off, chunkSize))
		b, err := r.at(off, n)
		if err != nil {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				end = off + int64(i) + 1
				break
			}
		}
		off += int64(n)
	}
	return end, nil
}

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
