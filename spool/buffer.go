package spool

// chunkBytes is the size of one append buffer chunk. Records never straddle
// chunks, so a chunk must hold the largest record; at four of them the space
// a sealed chunk can waste is under a quarter, and with usage events of
// ~150 bytes it is under 0.1%.
const chunkBytes = 4 * maxRecord

// keepFree is how many empty chunks a calm spool keeps for reuse; a busy one
// keeps all it has.
const keepFree = 4

// pending holds the encoded records that Append has accepted and the flusher
// has not yet taken, in fixed-size chunks that are recycled: growing never
// copies what is already buffered (so no multi-megabyte memmove on the
// append path when the disk stalls), and a spool whose load has been seen
// before never allocates.
//
// Invariant: bytes is the sum of len over filled and cur; filled chunks are
// non-empty and in sequence order, and cur holds records after all of them.
// The Spool's mu guards it.
type pending struct {
	cur    []byte   // chunk being filled; nil when none
	filled [][]byte // sealed chunks, oldest first
	free   [][]byte // empty chunks ready for reuse
	bytes  int      // record bytes in filled and cur
}

// newPending returns a pending buffer whose chunk lists never grow: at most
// maxPending bytes are pending or being written, every chunk but the last of
// each batch holds more than chunkBytes-maxRecord bytes, so no more than
// maxChunks(maxPending) chunks ever exist at once.
func newPending(maxPending int) pending {
	n := maxChunks(maxPending)
	return pending{filled: make([][]byte, 0, n), free: make([][]byte, 0, n)}
}

// maxChunks bounds the number of chunks that exist at once for maxPending:
// the sealed ones of the pending records and of the batch being written,
// plus the partly filled last chunk of each.
func maxChunks(maxPending int) int {
	return 2*(maxPending/(chunkBytes-maxRecord)+1) + 2
}

// reserve returns the next n bytes (n ≤ chunkBytes) of pending space,
// sealing the current chunk first if it cannot hold them.
func (p *pending) reserve(n int) []byte {
	if cap(p.cur)-len(p.cur) < n {
		if len(p.cur) > 0 {
			p.filled = append(p.filled, p.cur)
		}
		p.cur = p.take()
	}
	off := len(p.cur)
	p.cur = p.cur[:off+n]
	p.bytes += n
	return p.cur[off : off+n]
}

// take returns an empty chunk, reusing a free one when there is one.
func (p *pending) take() []byte {
	if k := len(p.free); k > 0 {
		c := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		return c
	}
	return make([]byte, 0, chunkBytes)
}

// takeAll moves every pending chunk, in order, into dst[:0] and returns it;
// p is left empty.
func (p *pending) takeAll(dst [][]byte) [][]byte {
	dst = append(dst[:0], p.filled...)
	clear(p.filled)
	p.filled = p.filled[:0]
	if len(p.cur) > 0 {
		dst = append(dst, p.cur)
		p.cur = nil
	}
	p.bytes = 0
	return dst
}

// recycle puts chunks the flusher has written back on the free list, keeping
// at most keep free chunks (and dropping any beyond that already there), and
// clears chunks so the caller's slice holds no references.
func (p *pending) recycle(chunks [][]byte, keep int) {
	for i, c := range chunks {
		if len(p.free) < keep {
			p.free = append(p.free, c[:0])
		}
		chunks[i] = nil
	}
	if len(p.free) > keep {
		clear(p.free[keep:])
		p.free = p.free[:keep]
	}
}
