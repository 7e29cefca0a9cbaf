package core

// Expire ends every reservation whose deadline has passed: a pending or
// ready one is released with no charge (counted Cancelled and
// ExpiredPending), a committed one is billed what it bills unfinished
// (its full quote, or nothing for a CaptureRelease), marked Lapsed,
// because the work may have run and its finish was lost. It scans
// at most once per SweepInterval, so calling it every loop iteration is
// cheap; it returns how many reservations it ended.
func (e *Engine) Expire(now int64) int {
	if now < e.nextSweep {
		return 0
	}
	e.nextSweep = now + e.sweepEvery
	ended := 0
	for i := 0; i < len(e.res.live); {
		idx := e.res.live[i]
		rs := &e.res.slots[idx]
		if rs.deadline > now || !e.expireOne(idx, rs) {
			i++
			continue
		}
		ended++ // release swapped another live slot into position i
	}
	return ended
}

func (e *Engine) expireOne(idx uint32, rs *resSlot) bool {
	switch rs.phase {
	case phasePending, phaseReady:
		rs.phase = phaseClosing
		e.counters.Cancelled++
		e.counters.ExpiredPending++
		e.end(idx, rs, rs.deadline, false)
	case phaseCommitted:
		rs.phase = phaseClosing
		e.counters.Lapsed++
		e.bill(rs, rs.lapseUnits(), rs.deadline, true)
		e.end(idx, rs, rs.deadline, true)
	default:
		return false
	}
	return true
}

// EndAll ends every live reservation as Expire would at its deadline: for
// shutdown, once no client can reach the node to commit, finish or cancel.
// Pending ones are released free; committed ones bill what they bill
// unfinished (lapseUnits), lapsed.
func (e *Engine) EndAll() int {
	ended := 0
	for i := 0; i < len(e.res.live); {
		idx := e.res.live[i]
		if !e.expireOne(idx, &e.res.slots[idx]) {
			i++
			continue
		}
		ended++
	}
	return ended
}
