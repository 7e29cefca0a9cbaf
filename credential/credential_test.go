package credential

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"

	"github.com/tollgated/tollgated/core"
)

var secret = bytes.Repeat([]byte{7}, 32)

func TestDigestIsHMACSHA256(t *testing.T) {
	h, err := NewHasher(secret)
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Digest([]byte("tg_live_abc"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tg_live_abc"))
	if !bytes.Equal(d[:], m.Sum(nil)) {
		t.Fatal("digest is not HMAC-SHA256 of the key under the secret")
	}
	p := d.Principal()
	if p.Hi>>56 != uint64(d[0]) || p.Lo&0xff != uint64(d[15]) {
		t.Fatalf("principal %x is not the leading 128 bits of %x", p, d)
	}
	other, _ := h.Digest([]byte("tg_live_abd"))
	if Equal(&d, &other) || !Equal(&d, &d) {
		t.Fatal("Equal is wrong")
	}
}

func TestHasherRefusals(t *testing.T) {
	if _, err := NewHasher(make([]byte, 31)); err == nil {
		t.Fatal("short secret accepted")
	}
	h, _ := NewHasher(secret)
	if _, err := h.Digest(nil); err != ErrBadKey {
		t.Fatal("empty key accepted")
	}
	if _, err := h.Digest(make([]byte, MaxKeyLen+1)); err != ErrBadKey {
		t.Fatal("long key accepted")
	}
}

func TestDigestDoesNotAllocate(t *testing.T) {
	h, _ := NewHasher(secret)
	key := []byte("tg_live_0123456789")
	if a := testing.AllocsPerRun(100, func() { h.Digest(key) }); a != 0 {
		t.Fatalf("Digest allocates %v", a)
	}
}

func TestCacheExactBytesAndExpiry(t *testing.T) {
	c := NewCache(8)
	p := core.Principal{Hi: 1, Lo: 2}
	c.Store([]byte("key-a"), p, 100)
	if got, ok := c.Lookup([]byte("key-a"), 99); !ok || got != p {
		t.Fatal("fresh entry missed")
	}
	if _, ok := c.Lookup([]byte("key-a"), 100); ok {
		t.Fatal("expired entry hit")
	}
	if _, ok := c.Lookup([]byte("key-b"), 0); ok {
		t.Fatal("different key hit")
	}
	if _, ok := c.Lookup([]byte("key-a "), 0); ok {
		t.Fatal("longer key hit")
	}
	c.Forget(p)
	if _, ok := c.Lookup([]byte("key-a"), 0); ok {
		t.Fatal("forgotten principal hit")
	}
}

func TestCacheIsBounded(t *testing.T) {
	c := NewCache(4)
	for i := range 1000 {
		c.Store([]byte{byte(i), byte(i >> 8), 'k'}, core.Principal{Lo: uint64(i)}, 1<<62)
	}
	if len(c.entries) != 4 {
		t.Fatalf("cache grew to %d", len(c.entries))
	}
	// The most recent key is always findable.
	if p, ok := c.Lookup([]byte{byte(999 & 0xff), byte(999 >> 8), 'k'}, 0); !ok || p.Lo != 999 {
		t.Fatal("latest key evicted")
	}
}

func TestCacheLookupDoesNotAllocate(t *testing.T) {
	c := NewCache(64)
	key := []byte("tg_live_0123456789")
	c.Store(key, core.Principal{Lo: 1}, 1<<62)
	if a := testing.AllocsPerRun(100, func() { c.Lookup(key, 5) }); a != 0 {
		t.Fatalf("Lookup allocates %v", a)
	}
}

// TestCacheTakeUsed: a key is reported once per use since the last report;
// what the reporter refuses is offered again.
func TestCacheTakeUsed(t *testing.T) {
	c := NewCache(8)
	a, b := core.Principal{Lo: 1}, core.Principal{Lo: 2}
	c.Store([]byte("key-a"), a, 100)
	c.Store([]byte("key-b"), b, 100)
	take := func(limit int) []core.Principal {
		var got []core.Principal
		c.TakeUsed(func(p core.Principal) bool {
			if len(got) == limit {
				return false
			}
			got = append(got, p)
			return true
		})
		return got
	}
	if got := take(1); len(got) != 1 {
		t.Fatalf("first report, room for one: %v", got)
	}
	if got := take(10); len(got) != 1 {
		t.Fatalf("the refused one is offered again, the taken one not: %v", got)
	}
	if got := take(10); len(got) != 0 {
		t.Fatalf("nothing used since: %v", got)
	}
	if _, ok := c.Lookup([]byte("key-b"), 50); !ok {
		t.Fatal("lookup missed")
	}
	if got := take(10); len(got) != 1 || got[0] != b {
		t.Fatalf("after one use of key-b: %v", got)
	}
}
