package hpack

// entryOverhead is the size an entry adds to its table beyond its name and
// value (§4.1), and to a header list beyond them (RFC 9113 §6.5.2).
const entryOverhead = 32

// staticTable is the static table of Appendix A; index i is at [i-1].
var staticTable = [61]struct{ name, value string }{
	{":authority", ""},
	{":method", "GET"},
	{":method", "POST"},
	{":path", "/"},
	{":path", "/index.html"},
	{":scheme", "http"},
	{":scheme", "https"},
	{":status", "200"},
	{":status", "204"},
	{":status", "206"},
	{":status", "304"},
	{":status", "400"},
	{":status", "404"},
	{":status", "500"},
	{"accept-charset", ""},
	{"accept-encoding", "gzip, deflate"},
	{"accept-language", ""},
	{"accept-ranges", ""},
	{"accept", ""},
	{"access-control-allow-origin", ""},
	{"age", ""},
	{"allow", ""},
	{"authorization", ""},
	{"cache-control", ""},
	{"content-disposition", ""},
	{"content-encoding", ""},
	{"content-language", ""},
	{"content-length", ""},
	{"content-location", ""},
	{"content-range", ""},
	{"content-type", ""},
	{"cookie", ""},
	{"date", ""},
	{"etag", ""},
	{"expect", ""},
	{"expires", ""},
	{"from", ""},
	{"host", ""},
	{"if-match", ""},
	{"if-modified-since", ""},
	{"if-none-match", ""},
	{"if-range", ""},
	{"if-unmodified-since", ""},
	{"last-modified", ""},
	{"link", ""},
	{"location", ""},
	{"max-forwards", ""},
	{"proxy-authenticate", ""},
	{"proxy-authorization", ""},
	{"range", ""},
	{"referer", ""},
	{"refresh", ""},
	{"retry-after", ""},
	{"server", ""},
	{"set-cookie", ""},
	{"strict-transport-security", ""},
	{"transfer-encoding", ""},
	{"user-agent", ""},
	{"vary", ""},
	{"via", ""},
	{"www-authenticate", ""},
}

// staticTexts holds the static table as texts, made once so that looking
// an entry up converts no string. It is never written after init.
var staticTexts [len(staticTable)][2]text

func init() {
	for i, e := range staticTable {
		staticTexts[i][0] = plainText([]byte(e.name))
		staticTexts[i][1] = plainText([]byte(e.value))
	}
}

// A table is the dynamic table (§2.3.2): a first-in, first-out list of
// entries whose octets (name, then value) are laid end to end in a ring of
// fixed capacity, wrapping around its end. Nothing is allocated after
// newTable.
//
// Invariants:
//   - size <= max <= limit <= len(octets), size is the §4.1 size of the
//     count live entries, and so count <= max/32 < len(ents);
//   - the live entries are ents[first], ents[first+1], ... (modulo
//     len(ents)), oldest first, and their octets are contiguous in the ring
//     from ents[first].off up to head, so they never overlap: their total
//     length is size - 32*count < len(octets).
type table struct {
	octets []byte
	ents   []entry
	first  int // the ring index in ents of the oldest entry
	count  int // the number of entries
	head   int // where the octets of the next entry go
	size   int // the size of the table (§4.1)
	max    int // the maximum size, as last set by a size update (§4.2)
	limit  int // the bound on max: SETTINGS_HEADER_TABLE_SIZE
}

// entry locates an entry's octets in the ring: the name at off, then the value.
type entry struct {
	off      uint32
	nameLen  uint32
	valueLen uint32
}

func newTable(limit int) table {
	assert(limit >= 0 && limit <= MaxTableBytes)
	t := table{
		// The entries' octets total at most limit-32; one octet more than
		// limit keeps the ring non-empty, so positions in it exist, even
		// when limit is 0.
		octets: make([]byte, limit+1),
		ents:   make([]entry, limit/entryOverhead+1),
		limit:  limit,
	}
	t.reset()
	return t
}

// reset empties the table and restores its maximum size to the limit, as
// at the start of a connection.
func (t *table) reset() {
	t.first, t.count, t.head, t.size = 0, 0, 0, 0
	t.max = t.limit
}

// setMax applies a dynamic table size update (§4.3), which the caller has
// checked against the limit.
func (t *table) setMax(max int) {
	assert(max >= 0 && max <= t.limit)
	t.max = max
	t.evictTo(max)
}

// evictTo evicts the oldest entries until the size is at most budget.
func (t *table) evictTo(budget int) {
	for t.size > budget {
		assert(t.count > 0)
		e := t.ents[t.first]
		t.size -= entryOverhead + int(e.nameLen) + int(e.valueLen)
		t.first = wrap(t.first+1, len(t.ents))
		t.count--
	}
	assert(t.size >= 0 && (t.count > 0 || t.size == 0))
}

// at sets name and value to those of entry i, 1 being the newest, or
// returns false if there is no such entry. The texts refer to the ring:
// they are valid until the next insert.
func (t *table) at(i uint64, name, value *text) bool {
	if i == 0 || i > uint64(t.count) {
		return false
	}
	e := t.ents[wrap(t.first+t.count-int(i), len(t.ents))]
	off, nameLen, valueLen := int(e.off), int(e.nameLen), int(e.valueLen)
	name.a, name.b = t.span(off, nameLen)
	name.huff, name.n = false, nameLen
	value.a, value.b = t.span(wrap(off+nameLen, len(t.octets)), valueLen)
	value.huff, value.n = false, valueLen
	return true
}

// wrap reduces a ring position i, which is below 2*n, modulo n, without
// the cost of a division.
func wrap(i, n int) int {
	if i >= n {
		i -= n
	}
	return i
}

// span returns the n octets of the ring from off, as one or two slices.
func (t *table) span(off, n int) (a, b []byte) {
	assert(off >= 0 && off < len(t.octets) && n >= 0 && n < len(t.octets))
	if end := off + n; end <= len(t.octets) {
		return t.octets[off:end], nil
	}
	return t.octets[off:], t.octets[:off+n-len(t.octets)]
}

// insert adds a new entry (§4.4). It first evicts the oldest entries until
// the new one fits; an entry larger than the maximum size empties the table
// and is not added.
//
// The name may be the text of an entry in the ring (§6.2.1 with an indexed
// name), even of one this insertion evicts (§4.4 warns of this). It is still
// intact when it is copied: eviction overwrites nothing, and the new octets
// are written from head onwards in ring order. The source lies among the
// entries that were live before eviction, that is in ring order after head
// (there is always some free space, 32 octets per entry) and ending at head
// at the latest. Since text.writeTo copies in ring order, each source octet
// is read before the write position reaches it. The value never refers to
// the ring: it comes from the block.
func (t *table) insert(name, value *text) {
	size := entryOverhead + name.n + value.n
	if size > t.max {
		t.evictTo(0)
		return
	}
	t.evictTo(t.max - size)
	// The new entry fits in ents: (count+1)*32 <= max <= limit.
	assert(t.count+1 < len(t.ents))

	a, b := t.span(t.head, name.n)
	name.writeTo(a, b)
	a, b = t.span(wrap(t.head+name.n, len(t.octets)), value.n)
	value.writeTo(a, b)

	t.ents[wrap(t.first+t.count, len(t.ents))] = entry{
		off:      uint32(t.head),
		nameLen:  uint32(name.n),
		valueLen: uint32(value.n),
	}
	t.count++
	t.size += size
	t.head = wrap(t.head+name.n+value.n, len(t.octets))
	assert(t.size <= t.max && t.count < len(t.ents))
}
