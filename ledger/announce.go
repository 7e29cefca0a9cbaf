package ledger

import (
	"math/bits"

	"github.com/tollgated/tollgated/core"
)

// AnnounceBits is how many leading bits of what an account can spend the
// other nodes of a fleet are kept up to date with: their view of it is
// never more than 1/2^(AnnounceBits-1) above the truth that settlements
// have reached (below 2^AnnounceBits units it is exact).
const AnnounceBits = 4

// WorthAnnouncing reports whether a move of what an account can spend
// (Spendable) from was to now matters to the other nodes of a fleet: any
// rise (a deposit, a budget, a forfeit restored: an account refused
// elsewhere may be admitted again), and a fall that changes its leading
// AnnounceBits bits. A settlement that takes 30 units of a million moves
// nothing another node decides on; the fall to the last units, and to 0,
// is announced step by step. So a busy account with money to spare is
// announced a few times in its whole life, not at every settlement, and
// the cost of an announcement — a transaction at every listening node —
// does not grow with the fleet's traffic.
func WorthAnnouncing(was, now core.CostUnits) bool {
	switch {
	case now > was:
		return true
	case now == was:
		return false
	}
	return leading(was) != leading(now)
}

// leading is v with all but its AnnounceBits leading bits cleared.
func leading(v core.CostUnits) core.CostUnits {
	drop := max(bits.Len64(uint64(v))-AnnounceBits, 0)
	return v >> drop << drop
}
