package spool

import (
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
)

// chunkReader reads records from a segment file with positioned reads of
// chunkSize, so scanning costs one system call per chunk, not per record.
// It never assumes the file stops growing: a request beyond the bytes it
// holds re-reads from the requested offset. Bytes once in a segment never
// change (segments are append-only and truncated only before any reader
// exists), so buffered bytes stay valid.
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
	hb, err := r.at(off, HeaderSize)
	if err != nil {
		return header{}, nil, err
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
