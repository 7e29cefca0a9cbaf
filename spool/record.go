package spool

import (
	"encoding/binary"
	"hash/crc32"
)

// MaxPayload is the largest payload one record may carry. Usage events are a
// few hundred bytes; the bound keeps a corrupt length field from making
// recovery allocate or read gigabytes, and lets a reader size one buffer for
// any record.
const MaxPayload = 64 << 10

// HeaderSize is the size of a record header: length, CRC, sequence number.
const HeaderSize = 16

// maxRecord is the largest encoded record.
const maxRecord = HeaderSize + MaxPayload

// castagnoli is CRC-32C, which amd64 and arm64 compute in hardware.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeRecord writes the record for seq and payload into dst, which must be
// exactly HeaderSize+len(payload) bytes long. The CRC covers dst[8:], the
// sequence number and the payload, which are contiguous on purpose.
func encodeRecord(dst []byte, seq uint64, payload []byte) {
	binary.LittleEndian.PutUint32(dst[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(dst[8:], seq)
	copy(dst[HeaderSize:], payload)
	binary.LittleEndian.PutUint32(dst[4:], crc32.Checksum(dst[8:], castagnoli))
}

// header is a decoded record header.
type header struct {
	length uint32
	crc    uint32
	seq    uint64
}

// decodeHeader decodes the first HeaderSize bytes of b.
func decodeHeader(b []byte) header {
	_ = b[HeaderSize-1]
	return header{
		length: binary.LittleEndian.Uint32(b[0:]),
		crc:    binary.LittleEndian.Uint32(b[4:]),
		seq:    binary.LittleEndian.Uint64(b[8:]),
	}
}

// recordLen is the encoded size of a record with this header.
func (h header) recordLen() int { return HeaderSize + int(h.length) }

// valid reports whether rec (header and payload, exactly h.recordLen() bytes)
// carries the CRC its header claims.
func (h header) valid(rec []byte) bool {
	return crc32.Checksum(rec[8:], castagnoli) == h.crc
}
