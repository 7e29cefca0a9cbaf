package ledger

import (
	"testing"

	"github.com/tollgated/tollgated/core"
)

// TestWorthAnnouncing: rises always; falls when they change the leading
// AnnounceBits bits, so what another node believes is at most an eighth
// above the settled truth, and exact near the end.
func TestWorthAnnouncing(t *testing.T) {
	for _, c := range []struct {
		was, now core.CostUnits
		want     bool
	}{
		{1000, 1000, false},
		{970, 1000, true}, // a deposit
		{1000, 970, false},
		{1000, 870, true},
		{1_000_000_000, 999_000_000, false},
		{1_000_000_000, 800_000_000, true},
		{15, 14, true}, // below 2^AnnounceBits, every unit
		{1, 0, true},
		{9, 0, true},
	} {
		if got := WorthAnnouncing(c.was, c.now); got != c.want {
			t.Errorf("WorthAnnouncing(%d, %d) = %v, want %v", c.was, c.now, got, c.want)
		}
	}
	// Whatever the steps, a fall not announced leaves what the others
	// last heard at most 1/2^(AnnounceBits-1) above the truth.
	heard := core.CostUnits(1 << 40)
	for now := heard; now > 0; now -= max(now/97, 1) {
		if WorthAnnouncing(heard, now) {
			heard = now
		}
		if excess := heard - now; excess > now>>(AnnounceBits-1) {
			t.Fatalf("others heard %d with %d left: %d above, more than an eighth", heard, now, excess)
		}
	}
}
