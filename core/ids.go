package core

import (
	"encoding/hex"
	"errors"
)

// MaxAccountIDLen bounds account ids so they fit fixed buffers on the wire
// and in usage records.
const MaxAccountIDLen = 64

// AccountID names an account. Users choose it: 1 to MaxAccountIDLen bytes of
// lowercase letters, digits, '.', '_' and '-', starting with a letter or digit.
type AccountID string

// ErrInvalidAccountID reports an account id outside that alphabet or length.
var ErrInvalidAccountID = errors.New("core: account id must be 1-64 bytes of [a-z0-9._-], starting with [a-z0-9]")

// Validate reports whether id is well formed.
func (id AccountID) Validate() error {
	if len(id) == 0 || len(id) > MaxAccountIDLen {
		return ErrInvalidAccountID
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return ErrInvalidAccountID
		}
	}
	return nil
}

// Principal identifies an authenticated caller: the leading 128 bits of its
// credential's HMAC. Several principals (keys) may act for one account.
type Principal struct{ Hi, Lo uint64 }

// RequestID identifies one admitted request in its usage event. Callers make
// it unique (128 random bits); the engine never interprets it.
type RequestID struct{ Hi, Lo uint64 }

// AppendHex appends id as 32 lowercase hex digits.
func (id RequestID) AppendHex(dst []byte) []byte {
	return appendHex128(dst, id.Hi, id.Lo)
}

func appendHex128(dst []byte, hi, lo uint64) []byte {
	var b [16]byte
	for i := range 8 {
		b[i] = byte(hi >> (56 - 8*i))
		b[8+i] = byte(lo >> (56 - 8*i))
	}
	return hex.AppendEncode(dst, b[:])
}

// PermissionSet is a set of up to 64 permissions, one bit each. What a bit
// means is the operator's business; the engine only tests containment.
type PermissionSet uint64

// Has reports whether s contains every permission in required.
func (s PermissionSet) Has(required PermissionSet) bool { return s&required == required }

// PolicyRevision is an opaque 256-bit tag of the policy a snapshot was built
// from. It is carried into every usage event and response, never interpreted.
// The zero revision means "unstated".
type PolicyRevision [32]byte

// AppendHex appends r as 64 lowercase hex digits.
func (r *PolicyRevision) AppendHex(dst []byte) []byte { return hex.AppendEncode(dst, r[:]) }
