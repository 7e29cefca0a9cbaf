package ledger

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func utc(y int, m time.Month, d, h, min int) int64 {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC).UnixNano()
}

func TestPeriodBoundsOnUTCBoundaries(t *testing.T) {
	for _, c := range []struct {
		name       string
		p          Period
		now        int64
		start, end int64
	}{
		{"none", PeriodNone, utc(2026, 3, 10, 12, 0), 0, 0},
		{"unknown period", Period(9), utc(2026, 3, 10, 12, 0), 0, 0},
		{"day", PeriodDay, utc(2026, 3, 10, 12, 0), utc(2026, 3, 10, 0, 0), utc(2026, 3, 11, 0, 0)},
		{"day at its start", PeriodDay, utc(2026, 3, 10, 0, 0), utc(2026, 3, 10, 0, 0), utc(2026, 3, 11, 0, 0)},
		{"day 1ns before the end", PeriodDay, utc(2026, 3, 11, 0, 0) - 1, utc(2026, 3, 10, 0, 0), utc(2026, 3, 11, 0, 0)},
		{"day before the epoch", PeriodDay, utc(1969, 12, 31, 23, 59), utc(1969, 12, 31, 0, 0), 0},
		{"week from a tuesday", PeriodWeek, utc(2026, 3, 10, 12, 0), utc(2026, 3, 9, 0, 0), utc(2026, 3, 16, 0, 0)},
		{"week at monday 00:00", PeriodWeek, utc(2026, 3, 16, 0, 0), utc(2026, 3, 16, 0, 0), utc(2026, 3, 23, 0, 0)},
		{"week on sunday night", PeriodWeek, utc(2026, 3, 15, 23, 59), utc(2026, 3, 9, 0, 0), utc(2026, 3, 16, 0, 0)},
		{"week of the epoch (a thursday)", PeriodWeek, 0, utc(1969, 12, 29, 0, 0), utc(1970, 1, 5, 0, 0)},
		{"month", PeriodMonth, utc(2026, 3, 10, 12, 0), utc(2026, 3, 1, 0, 0), utc(2026, 4, 1, 0, 0)},
		{"leap february", PeriodMonth, utc(2024, 2, 29, 23, 0), utc(2024, 2, 1, 0, 0), utc(2024, 3, 1, 0, 0)},
		{"december", PeriodMonth, utc(2025, 12, 31, 23, 59), utc(2025, 12, 1, 0, 0), utc(2026, 1, 1, 0, 0)},
		{"month at its start", PeriodMonth, utc(2026, 4, 1, 0, 0), utc(2026, 4, 1, 0, 0), utc(2026, 5, 1, 0, 0)},
		{"day at the end of time", PeriodDay, math.MaxInt64, math.MaxInt64 - math.MaxInt64%dayNs, math.MaxInt64},
		{"month at the end of time", PeriodMonth, math.MaxInt64, utc(2262, 4, 1, 0, 0), math.MaxInt64},
		{"month at the start of time", PeriodMonth, math.MinInt64, math.MinInt64, utc(1677, 10, 1, 0, 0)},
		// The earliest instant is Tuesday 1677-09-21 00:12:43 UTC.
		{"week at the start of time", PeriodWeek, math.MinInt64, math.MinInt64, utc(1677, 9, 27, 0, 0)},
		{"day at the start of time", PeriodDay, math.MinInt64, math.MinInt64, utc(1677, 9, 22, 0, 0)},
	} {
		s, e := PeriodBounds(c.p, c.now)
		if s != c.start || e != c.end {
			t.Errorf("%s: PeriodBounds(%d, %d) = [%s, %s), want [%s, %s)", c.name, c.p, c.now,
				time.Unix(0, s).UTC(), time.Unix(0, e).UTC(), time.Unix(0, c.start).UTC(), time.Unix(0, c.end).UTC())
		}
	}
}

// TestPeriodBoundsContainNowAndTile checks, for any instant, that the
// period contains it, starts on the right boundary, and that consecutive
// periods tile time (the end of one is the start of the next).
func TestPeriodBoundsContainNowAndTile(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := Period(rapid.IntRange(int(PeriodDay), int(PeriodMonth)).Draw(t, "period"))
		// Stay a month inside the representable range so nothing saturates.
		now := rapid.Int64Range(math.MinInt64+40*dayNs, math.MaxInt64-40*dayNs).Draw(t, "now")
		start, end := PeriodBounds(p, now)
		if !(start <= now && now < end) {
			t.Fatalf("period %d: %d not in [%d, %d)", p, now, start, end)
		}
		st := time.Unix(0, start).UTC()
		if st.Hour() != 0 || st.Minute() != 0 || st.Second() != 0 || st.Nanosecond() != 0 {
			t.Fatalf("period %d starts at %s, not midnight", p, st)
		}
		switch {
		case p == PeriodDay && end-start != dayNs,
			p == PeriodWeek && (end-start != weekNs || st.Weekday() != time.Monday),
			p == PeriodMonth && (st.Day() != 1 || !time.Unix(0, end).UTC().Equal(st.AddDate(0, 1, 0))):
			t.Fatalf("period %d of %s: [%s, %s)", p, time.Unix(0, now).UTC(), st, time.Unix(0, end).UTC())
		}
		if s2, _ := PeriodBounds(p, end); s2 != end {
			t.Fatalf("period %d: next period starts at %d, not at the end %d", p, s2, end)
		}
		if s3, e3 := PeriodBounds(p, end-1); s3 != start || e3 != end {
			t.Fatalf("period %d: end-1 is in [%d, %d), want [%d, %d)", p, s3, e3, start, end)
		}
	})
}
