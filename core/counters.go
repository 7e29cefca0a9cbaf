package core

// Counters are an engine's outcome tallies since it started. They are plain
// integers owned by the engine's goroutine; a scraper gets a copy through
// Engine.Counters on that goroutine (a shard publishes them).
//
// Every admitted request ends in exactly one terminal counter:
//
//	Started + Shed + RefusedAtStart + Cancelled + (still in flight) == Admitted
//
// and every started one is billed exactly once: Finished + Lapsed == Started
// once nothing is in flight.
type Counters struct {
	Admitted       uint64
	UnitsAdmitted  CostUnits // quoted at admission, not billed
	Denials        [NumDenyReasons]uint64
	Started        uint64 // committed: execution began
	Shed           uint64 // refused by the capacity gate after admission
	RefusedAtStart uint64 // commit refused: funding lapsed before start
	Cancelled      uint64 // cancelled, or expired pending, before start
	ExpiredPending uint64 // the part of Cancelled that timed out
	Finished       uint64 // billed by Finish
	Lapsed         uint64 // billed at quote by Expire: never finished in time
	UnitsBilled    CostUnits
	Overage        uint64 // admitted on elastic overage
	// CommitRefusals counts commits refused for any reason, including a
	// commit that lost its race with a cancel. They are not denials.
	CommitRefusals uint64
}

// TerminalSum is Started + Shed + RefusedAtStart + Cancelled.
func (c *Counters) TerminalSum() uint64 {
	return c.Started + c.Shed + c.RefusedAtStart + c.Cancelled
}
