package core

import "math/bits"

// principalTable maps principals to their entries by open addressing with
// linear probing. Principals are already uniform (HMAC output) in
// tollgated, but embedders may pick any, so the index comes from a
// multiplicative mix: one multiply instead of a general-purpose hash.
type principalTable struct {
	slots []principalSlot
	shift uint8 // 64 - log2(len(slots))
	n     int
}

type principalSlot struct {
	key Principal
	e   *principalEntry // nil: empty
}

const minPrincipalSlots = 16

func (t *principalTable) index(p Principal) uint64 {
	return ((p.Hi ^ bits.RotateLeft64(p.Lo, 32)) * 0x9e3779b97f4a7c15) >> t.shift
}

func (t *principalTable) get(p Principal) *principalEntry {
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
	t.n = 0
	for _, s := range old {
		if s.e != nil {
			t.put(s.key, s.e)
		}
	}
}
