// Package credential verifies customer API keys. Keys are never stored: the
// server keeps HMAC-SHA256 digests of them under its own secret, and a key's
// principal is the digest's leading 128 bits. Verification compares the
// whole digest in constant time. Each shard keeps a bounded Cache of keys it
// has verified, so the HMAC is paid once per key, not once per request; a
// cache hit skips authentication only — admission still looks the principal
// up, so revoking a key (unbinding its principal) stops it at once.
package credential

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"

	"github.com/tollgated/tollgated/core"
)

// MaxKeyLen bounds a presented key; longer ones are refused unread.
const MaxKeyLen = 128

// Digest is the HMAC-SHA256 of a key under the server secret.
type Digest [32]byte

// Principal is the digest's leading 128 bits.
func (d *Digest) Principal() core.Principal {
	var p core.Principal
	for i := range 8 {
		p.Hi = p.Hi<<8 | uint64(d[i])
		p.Lo = p.Lo<<8 | uint64(d[8+i])
	}
	return p
}

// ErrBadKey reports an empty or over-long key.
var ErrBadKey = errors.New("credential: key must be 1-128 bytes")

// Hasher computes digests under one server secret. It is not safe for
// concurrent use: each shard owns one, so its HMAC state is reused without
// allocation.
type Hasher struct {
	mac interface {
		Write([]byte) (int, error)
		Sum([]byte) []byte
		Reset()
	}
	sum [32]byte
}

// NewHasher returns a Hasher for secret, which must be at least 32 bytes.
func NewHasher(secret []byte) (*Hasher, error) {
	if len(secret) < 32 {
		return nil, errors.New("credential: server secret must be at least 32 bytes")
	}
	return &Hasher{mac: hmac.New(sha256.New, secret)}, nil
}

// Digest computes key's digest.
func (h *Hasher) Digest(key []byte) (Digest, error) {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return Digest{}, ErrBadKey
	}
	h.mac.Reset()
	h.mac.Write(key)
	var d Digest
	copy(d[:], h.mac.Sum(h.sum[:0]))
	return d, nil
}

// Equal compares two digests in constant time.
func Equal(a, b *Digest) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }
