package ledger

import (
	"math"
	"time"
)

const (
	dayNs  = int64(24 * time.Hour)
	weekNs = 7 * dayNs
	// mondayOffset is how far the first Monday 00:00 UTC after the Unix
	// epoch (1970-01-05; the epoch was a Thursday) lies past the epoch.
	mondayOffset = 4 * dayNs
)

// PeriodBounds returns the budget period of kind p that contains now (Unix
// ns, UTC): start <= now < end. Day periods start at 00:00 UTC, weeks on
// Monday 00:00 UTC, months on the 1st at 00:00 UTC. PeriodNone (and any
// unknown period) has no bounds: (0, 0).
//
// Bounds that fall outside int64 nanoseconds (years before 1678 or after
// 2262) saturate at math.MinInt64 / math.MaxInt64, so the result is always
// defined and start <= now <= end still holds.
func PeriodBounds(p Period, now int64) (start, end int64) {
	switch p {
	case PeriodDay:
		return fixedBounds(now, dayNs, 0)
	case PeriodWeek:
		return fixedBounds(now, weekNs, mondayOffset)
	case PeriodMonth:
		t := time.Unix(0, now).UTC()
		y, m, _ := t.Date()
		first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return saturatedNanos(first), saturatedNanos(first.AddDate(0, 1, 0))
	}
	return 0, 0
}

// maxAdvance bounds how many periods AdvancePeriods looks ahead: far
// enough for any debt anyone pays off by waiting (a daily budget's ~27
// years), near enough that a month's arithmetic stays cheap.
const maxAdvance = 10_000

// AdvancePeriods returns the end of the period n periods of kind p after
// the one that ends at end (end itself for n = 0), or 0 (never) when that
// lies beyond maxAdvance periods or past the end of int64 nanoseconds. A
// PeriodNone has no next period: 0.
func AdvancePeriods(p Period, end int64, n uint64) int64 {
	if n > maxAdvance || end == math.MaxInt64 {
		return 0
	}
	var size int64
	switch p {
	case PeriodDay:
		size = dayNs
	case PeriodWeek:
		size = weekNs
	case PeriodMonth:
		t := time.Unix(0, end).UTC().AddDate(0, int(n), 0)
		if next := saturatedNanos(t); next != math.MaxInt64 {
			return next
		}
		return 0
	default:
		return 0
	}
	if end > math.MaxInt64-int64(n)*size {
		return 0
	}
	return end + int64(n)*size
}

// PeriodsBetween is how many whole periods of kind p lie between the
// period boundaries end and t >= end, t rounded down to a boundary: the n
// for which AdvancePeriods(p, end, n) <= t < AdvancePeriods(p, end, n+1).
// 0 for PeriodNone.
func PeriodsBetween(p Period, end, t int64) uint64 {
	switch p {
	case PeriodDay:
		return uint64(t-end) / uint64(dayNs)
	case PeriodWeek:
		return uint64(t-end) / uint64(weekNs)
	case PeriodMonth:
		e, n := time.Unix(0, end).UTC(), time.Unix(0, t).UTC()
		return uint64((n.Year()-e.Year())*12 + int(n.Month()) - int(e.Month()))
	}
	return 0
}

// fixedBounds returns the period of length size, aligned to offset (mod
// size), that contains now. It computes the remainder first so that no
// intermediate value can overflow, then saturates the bounds.
func fixedBounds(now, size, offset int64) (start, end int64) {
	r := ((now%size-offset%size)%size + size) % size // now - start, in [0, size)
	if now < math.MinInt64+r {
		start = math.MinInt64
	} else {
		start = now - r
	}
	if now > math.MaxInt64-(size-r) {
		end = math.MaxInt64
	} else {
		end = now + (size - r)
	}
	return start, end
}

// saturatedNanos is t in Unix ns, clamped to the int64 range (t is always
// a whole second here, so only the seconds can overflow).
func saturatedNanos(t time.Time) int64 {
	s := t.Unix()
	switch {
	case s > math.MaxInt64/int64(time.Second):
		return math.MaxInt64
	case s < math.MinInt64/int64(time.Second):
		return math.MinInt64
	}
	return s * int64(time.Second)
}
