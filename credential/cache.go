package credential

import (
	"crypto/subtle"
	"hash/maphash"

	"github.com/tollgated/tollgated/core"
)

// Cache remembers which principal a key verified as, for keys a shard has
// seen. It is bounded (a fixed number of entries, each holding the exact key
// bytes) and set-associative: a new key evicts the older of the two entries
// its hash selects. It allocates only when created. One goroutine owns it.
type Cache struct {
	seed    maphash.Seed
	entries []cacheEntry
	mask    uint64
	tick    uint64
	hits    uint64
	misses  uint64
}

type cacheEntry struct {
	n     uint8 // key length; 0 = empty
	key   [MaxKeyLen]byte
	p     core.Principal
	until int64 // Unix ns: re-verify after this
	used  uint64
	// fresh: the key authenticated since TakeUsed last reported it.
	fresh bool
}

// NewCache returns a cache of at least size entries (rounded up to a power
// of two, minimum 2).
func NewCache(size int) *Cache {
	n := 2
	for n < size {
		n <<= 1
	}
	return &Cache{seed: maphash.MakeSeed(), entries: make([]cacheEntry, n), mask: uint64(n - 2)}
}

// Lookup returns the principal key verified as, if it is cached and still
// fresh at now. The key comparison is constant-time in the key's bytes.
func (c *Cache) Lookup(key []byte, now int64) (core.Principal, bool) {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return core.Principal{}, false
	}
	i := maphash.Bytes(c.seed, key) & c.mask
	for j := i; j < i+2; j++ {
		e := &c.entries[j]
		if int(e.n) == len(key) && now < e.until && subtle.ConstantTimeCompare(e.key[:e.n], key) == 1 {
			c.tick++
			e.used, e.fresh = c.tick, true
			c.hits++
			return e.p, true
		}
	}
	c.misses++
	return core.Principal{}, false
}

// Store records that key verified as p, to be trusted until until.
func (c *Cache) Store(key []byte, p core.Principal, until int64) {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return
	}
	i := maphash.Bytes(c.seed, key) & c.mask
	e := &c.entries[i]
	if o := &c.entries[i+1]; o.used < e.used {
		e = o
	}
	c.tick++
	e.n = uint8(len(key))
	copy(e.key[:], key)
	e.p, e.until, e.used, e.fresh = p, until, c.tick, true
}

// TakeUsed passes report the principal of every key that authenticated
// since the last call (a key used through several entries may come twice),
// forgetting each one report accepts; it stops at the first refusal, and
// what it did not take is offered again next time. A use whose entry was
// evicted before the call is not reported: last use is coarse by design.
func (c *Cache) TakeUsed(report func(core.Principal) bool) {
	for i := range c.entries {
		e := &c.entries[i]
		if !e.fresh || e.n == 0 {
			continue
		}
		if !report(e.p) {
			return
		}
		e.fresh = false
	}
}

// Forget drops every cached key that verified as p (for example on
// revocation, so the next use re-verifies).
func (c *Cache) Forget(p core.Principal) {
	for i := range c.entries {
		if c.entries[i].n != 0 && c.entries[i].p == p {
			c.entries[i] = cacheEntry{}
		}
	}
}

// Stats reports hits and misses since the cache was made.
func (c *Cache) Stats() (hits, misses uint64) { return c.hits, c.misses }
