package core

// tokenScale makes a token bucket exact in integers: the level is kept in
// token-nanoseconds, so refilling rate tokens per second adds exactly
// rate per elapsed nanosecond with no division and no rounding.
const tokenScale = 1_000_000_000

// bucket is a token bucket with at most burst tokens refilled at rate tokens
// per second. Rates and bursts fit uint32, so burst×tokenScale < 2^63.
type bucket struct {
	level uint64 // tokens × tokenScale
	last  int64  // time of the last refill, Unix ns; 0 = never used
}

// take removes n tokens at time now if the bucket holds them. Otherwise it
// removes nothing and reports how many nanoseconds until it would. Time that
// appears to run backwards (callers on other threads, a stepped clock) adds
// nothing rather than wrapping.
//
// A zero rate or a burst below n (an engine's share of a limit, for now)
// refuses with shareRetryHint: only the control plane moving share can help.
func (b *bucket) take(n uint64, rate, burst uint32, now int64) (ok bool, wait int64) {
	if rate == 0 || uint64(burst) < n {
		b.level = min(b.level, uint64(burst)*tokenScale)
		return false, shareRetryHint
	}
	capacity := uint64(burst) * tokenScale
	if b.last == 0 {
		b.level, b.last = capacity, now
	} else if now > b.last {
		elapsed := uint64(now - b.last)
		room := capacity - min(b.level, capacity)
		// elapsed×rate may overflow; only the part that fills the room matters.
		if elapsed >= room/uint64(rate)+1 {
			b.level = capacity
		} else {
			b.level += elapsed * uint64(rate)
		}
		b.last = now
	}
	b.level = min(b.level, capacity) // a lowered burst takes effect at once
	need := n * tokenScale           // n ≤ burst, checked by the caller
	if b.level >= need {
		b.level -= need
		return true, 0
	}
	deficit := need - b.level
	return false, int64((deficit + uint64(rate) - 1) / uint64(rate))
}

// left is what the bucket holds at now, refilled as take would but not
// changed: whole tokens, and nanoseconds until it is full at rate (0 when
// full or rate is 0).
func (b *bucket) left(rate, burst uint32, now int64) (tokens uint32, full int64) {
	capacity := uint64(burst) * tokenScale
	level := min(b.level, capacity)
	if b.last == 0 {
		level = capacity
	} else if rate != 0 && now > b.last {
		elapsed := uint64(now - b.last)
		if room := capacity - level; elapsed >= room/uint64(rate)+1 {
			level = capacity
		} else {
			level += elapsed * uint64(rate)
		}
	}
	if rate != 0 {
		full = int64((capacity - level + uint64(rate) - 1) / uint64(rate))
	}
	return uint32(level / tokenScale), full
}
