package core

import "math/bits"

// principalTable maps principals to their entries by open addressing with
// linear probing. Principals are already uniform (HMAC output) in
// tollgated, but embedders may pick any, so the index comes from a
// multiplicative mix: one multiply instead of a general-purpose hash.
//
// Once the table outgrows the caches, a lookup's slot is a cache and TLB
// miss of its own, one page per active principal. A small set-associative
// cache of recent hits sits in front of it then, so a hot set of a few
// thousand principals costs the same lookup among a million as among a
// thousand (BenchmarkFullPathAccounts/active1k).
type principalTable struct {
	slots []principalSlot
	shift uint8 // 64 - log2(len(slots))
	n     int

	cache      []principalWays // nil until the table is large
	cacheShift uint8           // 64 - log2(len(cache))
}

type principalSlot struct {
	key Principal
	e   *principalEntry // nil: empty
}

const minPrincipalSlots = 16

// principalWays is one set of the lookup cache: two recent hits in one
// cache line, the most recent first. A nil entry is an empty way.
type principalWays struct {
	key [2]Principal
	e   [2]*principalEntry
	_   [16]byte
}

const (
	// cacheSets × 2 ways is the hot set the cache holds: 4,096 principals
	// in 128 KiB, which stays in a core's L2 and in its TLB.
	cacheSets = 2048
	// cacheFromSlots is the table size from which the cache pays: below
	// it the table itself is no bigger than the cache.
	cacheFromSlots = 1 << 14
)

func mixPrincipal(p Principal) uint64 {
	return (p.Hi ^ bits.RotateLeft64(p.Lo, 32)) * 0x9e3779b97f4a7c15
}

func (t *principalTable) index(p Principal) uint64 { return mixPrincipal(p) >> t.shift }

// enableCache puts a lookup cache of sets sets (a power of two) in front
// of the table. Tests use small ones to exercise eviction.
func (t *principalTable) enableCache(sets int) {
	t.cache = make([]principalWays, sets)
	t.cacheShift = uint8(64 - bits.TrailingZeros(uint(sets)))
}

func (t *principalTable) ways(p Principal) *principalWays {
	return &t.cache[mixPrincipal(p)>>t.cacheShift]
}

func (t *principalTable) get(p Principal) *principalEntry {
	if t.cache != nil {
		return t.getCached(p)
	}
	return t.probe(p)
}

func (t *principalTable) getCached(p Principal) *principalEntry {
	w := t.ways(p)
	if w.key[0] == p && w.e[0] != nil {
		return w.e[0]
	}
	if w.key[1] == p && w.e[1] != nil {
		return w.e[1]
	}
	e := t.probe(p)
	if e != nil {
		w.key[1], w.e[1] = w.key[0], w.e[0]
		w.key[0], w.e[0] = p, e
	}
	return e
}

// forget drops p from the cache after the table's answer for p changed.
func (t *principalTable) forget(p Principal) {
	if t.cache == nil {
		return
	}
	w := t.ways(p)
	for i := range w.key {
		if w.key[i] == p {
			w.key[i], w.e[i] = Principal{}, nil
		}
	}
}

func (t *principalTable) probe(p Principal) *principalEntry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.index(p); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil || s.key == p {
			return s.e
		}
	}
}

func (t *principalTable) put(p Principal, e *principalEntry) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	t.forget(p)
	mask := uint64(len(t.slots) - 1)
	for i := t.index(p); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			s.key, s.e = p, e
			t.n++
			return
		}
		if s.key == p {
			s.e = e
			return
		}
	}
}

// remove deletes p by shifting later members of its probe run back, so no
// tombstones accumulate and lookups stay short.
func (t *principalTable) remove(p Principal) {
	if t.n == 0 {
		return
	}
	t.forget(p)
	mask := uint64(len(t.slots) - 1)
	i := t.index(p)
	for ; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return
		}
		if s.key == p {
			break
		}
	}
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &t.slots[j]
		if s.e == nil {
			break
		}
		home := t.index(s.key)
		// Move s into the hole at i unless its home lies cyclically in (i, j].
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = principalSlot{}
	t.n--
}

func (t *principalTable) grow() {
	size := max(minPrincipalSlots, 2*len(t.slots))
	old := t.slots
	t.slots = make([]principalSlot, size)
	adviseHugePages(t.slots)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	if t.cache == nil && size >= cacheFromSlots {
		t.enableCache(cacheSets)
	}
	t.n = 0
	for _, s := range old {
		if s.e != nil {
			t.put(s.key, s.e)
		}
	}
}
