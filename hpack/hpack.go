package hpack

import "errors"

// Errors.
var (
	// ErrCompression reports a malformed header block. It is a connection
	// error (COMPRESSION_ERROR): the dynamic table may now be out of step
	// with the peer's.
	ErrCompression = errors.New("hpack: malformed header block")

	// ErrTooLarge reports a header list larger than the bound of the Fields
	// it was decoded into. The whole block was decoded, so the dynamic table
	// is in step with the peer's: it is a stream error only.
	ErrTooLarge = errors.New("hpack: header list too large")
)

// MaxTableBytes bounds the dynamic table size a Decoder may be made with.
const MaxTableBytes = 64 << 10

// Static table indices the server uses.
const (
	StaticStatus200   = 8  // :status 200
	StaticContentType = 31 // content-type, with no value
)

// maxSizeUpdates is the number of dynamic table size updates a block may
// begin with: the smallest size since the last block, then the final one
// (§4.2).
const maxSizeUpdates = 2

// Decoder decodes the header blocks of one connection, in order.
type Decoder struct {
	table table

	// name and value hold the texts of a dynamic table entry being looked
	// up, or of a literal name, while a field is decoded.
	name, value text
}

// NewDecoder makes a decoder whose dynamic table may hold at most
// maxTableBytes, the SETTINGS_HEADER_TABLE_SIZE the server advertises (at
// most MaxTableBytes). The table starts at that size, and size updates may
// not exceed it. Its storage, about 1.4 times maxTableBytes, is allocated
// here once.
//
// A client encodes with a table of 4096 octets until it has received the
// server's SETTINGS (RFC 9113 §6.5.3), so a server that advertises less
// than 4096 must still accept 4096 until then: maxTableBytes should be at
// least 4096.
func NewDecoder(maxTableBytes uint32) *Decoder {
	assert(maxTableBytes <= MaxTableBytes)
	return &Decoder{table: newTable(int(maxTableBytes))}
}

// Reset empties the table, for a new connection.
func (d *Decoder) Reset() {
	d.table.reset()
}

// Decode decodes one complete header block (the HEADERS fragment with its
// CONTINUATIONs, concatenated) into f, which it resets first.
//
// It returns ErrCompression if the block is malformed; f then holds an
// arbitrary prefix of the list. It returns ErrTooLarge if the list exceeds
// f's bound; f then holds the fields that fitted before the first one that
// did not, and f.Size counts them all.
func (d *Decoder) Decode(block []byte, f *Fields) error {
	f.reset()
	p, ok := d.sizeUpdates(block)
	for ok && len(p) > 0 {
		p, ok = d.field(p, f)
	}
	if !ok {
		return ErrCompression
	}
	if f.tooLarge {
		return ErrTooLarge
	}
	return nil
}

// sizeUpdates applies the dynamic table size updates (§6.3) at the start of
// the block p, and returns the rest of p. A size update anywhere else is
// rejected by field.
func (d *Decoder) sizeUpdates(p []byte) (rest []byte, ok bool) {
	for range maxSizeUpdates {
		if len(p) == 0 || p[0]&0xe0 != 0x20 {
			break
		}
		var size uint64
		size, p, ok = readInt(p, 5)
		if !ok || size > uint64(d.table.limit) {
			return nil, false
		}
		d.table.setMax(int(size))
	}
	return p, true
}

// field decodes the field representation at the start of p into f and
// returns the rest of p.
func (d *Decoder) field(p []byte, f *Fields) (rest []byte, ok bool) {
	switch b := p[0]; {
	case b&0x80 == 0x80: // 1xxxxxxx: indexed (§6.1)
		return d.indexed(p, f)
	case b&0xc0 == 0x40: // 01xxxxxx: literal with incremental indexing (§6.2.1)
		return d.literal(p, 6, true, f)
	case b&0xe0 == 0x20: // 001xxxxx: a size update after a field (§4.2)
		return nil, false
	default: // 0000xxxx, 0001xxxx: literal without indexing, never indexed (§6.2.2, §6.2.3)
		return d.literal(p, 4, false, f)
	}
}

// indexed decodes an indexed field (§6.1).
func (d *Decoder) indexed(p []byte, f *Fields) (rest []byte, ok bool) {
	i, p, ok := readInt(p, 7)
	if !ok {
		return nil, false
	}
	name, value, ok := d.at(i)
	if !ok {
		return nil, false
	}
	f.add(name, value)
	return p, true
}

// literal decodes a literal field (§6.2) whose name index has an n-bit
// prefix, adding it to the dynamic table if indexing.
func (d *Decoder) literal(p []byte, n uint8, indexing bool, f *Fields) (rest []byte, ok bool) {
	i, p, ok := readInt(p, n)
	if !ok {
		return nil, false
	}
	var name *text
	if i == 0 {
		name = &d.name
		p, ok = readString(p, name)
	} else {
		name, _, ok = d.at(i)
	}
	if !ok {
		return nil, false
	}
	var value text
	if p, ok = readString(p, &value); !ok {
		return nil, false
	}
	// Store the field before inserting it: insertion may evict the entry
	// name refers to, and then overwrite it.
	stored := f.add(name, &value)
	if !indexing {
		return p, true
	}
	if stored {
		// Copy the field as stored rather than decode its Huffman codes
		// again. (name may point into staticTexts: it is not reused.)
		last := f.count - 1
		storedName, storedValue := plainText(f.Name(last)), plainText(f.Value(last))
		d.table.insert(&storedName, &storedValue)
		return p, true
	}
	d.table.insert(name, &value)
	return p, true
}

// at returns the name and value at index i of the static and dynamic
// tables (§2.3.3), or false if there is none: index 0 or past the end. The
// texts are valid until the next call.
func (d *Decoder) at(i uint64) (name, value *text, ok bool) {
	if i == 0 {
		return nil, nil, false
	}
	if i <= uint64(len(staticTexts)) {
		e := &staticTexts[i-1]
		return &e[0], &e[1], true
	}
	if !d.table.at(i-uint64(len(staticTexts)), &d.name, &d.value) {
		return nil, nil, false
	}
	return &d.name, &d.value, true
}

// assert panics if a condition the package maintains does not hold: a bug,
// not bad input.
func assert(ok bool) {
	if !ok {
		panic("hpack: assertion failed")
	}
}
