package core

// Gate limits how many admitted requests may execute at once on one engine.
// A nil *Gate is "no gate" and costs one nil check. Both capacity classes
// use the shared pool first; only Assured accounts may fall through to the
// reserve, so a best-effort flood can never take it.
type Gate struct {
	shared, reserve         uint32 // pool sizes
	sharedUsed, reserveUsed uint32
}

// permit records which pool a reservation holds.
type permit uint8

const (
	permitNone permit = iota
	permitShared
	permitReserve
)

// NewUniformGate is a single pool of total execution slots.
func NewUniformGate(total uint32) *Gate { return &Gate{shared: total} }

// NewReservedGate keeps reserve of total slots for Assured accounts.
func NewReservedGate(total, reserve uint32) *Gate {
	reserve = min(reserve, total)
	return &Gate{shared: total - reserve, reserve: reserve}
}

func (g *Gate) acquire(class CapacityClass) (permit, bool) {
	if g.sharedUsed < g.shared {
		g.sharedUsed++
		return permitShared, true
	}
	if class == CapacityAssured && g.reserveUsed < g.reserve {
		g.reserveUsed++
		return permitReserve, true
	}
	return permitNone, false
}

func (g *Gate) release(p permit) {
	switch p {
	case permitShared:
		g.sharedUsed--
	case permitReserve:
		g.reserveUsed--
	}
}

// InUse reports the slots taken from each pool.
func (g *Gate) InUse() (shared, reserve uint32) { return g.sharedUsed, g.reserveUsed }
