package hpack

import "math"

// Fields is a decoded header list. Its storage, an arena for the octets of
// names and values and an index of where each field lies in it, is
// allocated once by NewFields and reused by every Decode into it.
type Fields struct {
	// Invariants: len(arena) == max and len(index) == max/32, which is
	// enough for any list within max, since each field counts 32 plus the
	// length of its name and value; used <= len(arena) is the arena's
	// filled prefix; the first count entries of index describe the stored
	// fields, in order.
	arena    []byte
	index    []field
	count    int   // the number of fields stored
	used     int   // the octets of arena in use
	size     int64 // the size of the whole decoded list, stored or not
	max      int   // the bound on size
	tooLarge bool  // size exceeded max: fields are no longer stored
}

// field locates a field in the arena: its name at off, then its value.
type field struct {
	off      uint32
	nameLen  uint32
	valueLen uint32
}

// NewFields makes room for a list of at most maxListBytes, counted as
// SETTINGS_MAX_HEADER_LIST_SIZE counts (RFC 9113 §6.5.2): the length of
// each field's name and value plus 32. It allocates maxListBytes octets
// plus 12 bytes for every 32 of them.
func NewFields(maxListBytes int) *Fields {
	assert(maxListBytes >= 0 && int64(maxListBytes) <= math.MaxUint32)
	return &Fields{
		arena: make([]byte, maxListBytes),
		index: make([]field, maxListBytes/entryOverhead),
		max:   maxListBytes,
	}
}

// reset empties the list.
func (f *Fields) reset() {
	f.count, f.used, f.size, f.tooLarge = 0, 0, 0, false
}

// add appends a field to the list and returns true, unless the list would
// exceed its bound: then the list stops growing for the rest of the block,
// which only counts the size (Decode then reports ErrTooLarge).
func (f *Fields) add(name, value *text) bool {
	f.size += int64(entryOverhead + name.n + value.n)
	if f.tooLarge || f.size > int64(f.max) {
		f.tooLarge = true
		return false
	}
	// The list is within max, so its fields fit: 32 per field in index,
	// and names and values in arena.
	assert(f.count < len(f.index))
	off := f.used
	end := off + name.n + value.n
	assert(end <= len(f.arena))
	name.writeTo(f.arena[off:off+name.n], nil)
	value.writeTo(f.arena[off+name.n:end], nil)
	f.index[f.count] = field{
		off:      uint32(off),
		nameLen:  uint32(name.n),
		valueLen: uint32(value.n),
	}
	f.count++
	f.used = end
	return true
}

// Len returns the number of fields in the list.
func (f *Fields) Len() int {
	return f.count
}

// Name returns the name of field i. It is valid until the next Decode into
// f; its capacity is its length, so appending to it cannot overwrite
// another field.
func (f *Fields) Name(i int) []byte {
	e := f.index[:f.count][i]
	start, end := int(e.off), int(e.off)+int(e.nameLen)
	return f.arena[start:end:end]
}

// Value returns the value of field i, valid as Name is.
func (f *Fields) Value(i int) []byte {
	e := f.index[:f.count][i]
	start := int(e.off) + int(e.nameLen)
	end := start + int(e.valueLen)
	return f.arena[start:end:end]
}

// Get returns the value of the first field named exactly name, valid as
// Value is. Names in HTTP/2 are lower case, so name should be too.
func (f *Fields) Get(name string) ([]byte, bool) {
	for i := range f.count {
		if string(f.Name(i)) == name {
			return f.Value(i), true
		}
	}
	return nil, false
}

// Size returns the size of the decoded list: the length of each field's
// name and value plus 32. After ErrTooLarge it counts every field of the
// block, stored or not, saturating at math.MaxInt.
func (f *Fields) Size() int {
	return int(min(f.size, int64(math.MaxInt)))
}
