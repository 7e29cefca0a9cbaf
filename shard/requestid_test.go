package shard

import (
	"testing"
	"time"
)

// TestRequestIDNamesItsMicrosecondAndShard pins what docs/OPERATIONS.md
// tells an operator to read off a request id: its first 12 hex digits are
// the microsecond it was committed modulo 2^48 (they wrap about every 8.9
// years: add the multiple of 2^48 that brings them closest below now), the
// next 4 the shard.
func TestRequestIDNamesItsMicrosecondAndShard(t *testing.T) {
	h := newHarness(t, 3, 64)
	committed := time.Date(2026, 12, 3, 18, 3, 10, 739527000, time.UTC)
	id := h.s.requestID(committed.UnixNano())
	if shard := id.Hi & 0xffff; shard != 3 {
		t.Fatalf("shard %d, want 3", shard)
	}
	const wrap = uint64(1) << 48
	us := id.Hi >> 16
	now := uint64(committed.Add(time.Hour).UnixMicro()) // read an hour later
	us += (now - us) / wrap * wrap
	if got := time.UnixMicro(int64(us)).UTC(); !got.Equal(committed) {
		t.Fatalf("the id decodes to %v, want %v", got, committed)
	}
}
