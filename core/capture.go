package core

// Capture is how a reservation is ended: by the principal that admitted it
// (the default), or — authorize here, capture later — by the service that
// did the work, on the customer's behalf; and, for the latter, what it
// bills when its deadline passes without a finish.
type Capture uint8

const (
	// CaptureNone: the admitting principal ends the reservation; committed
	// and unfinished at its deadline, it bills its quote.
	CaptureNone Capture = iota
	// CaptureBill: a service ends it (the admitting principal may not);
	// unfinished at its deadline, it bills its quote — a lost finish is
	// never free work, so a failed or killed service bills the hold.
	CaptureBill
	// CaptureRelease: a service ends it; unfinished at its deadline it
	// bills nothing — work the service never reports is free, so what it
	// did not see (a request the gateway refused) is never billed.
	CaptureRelease
)

// SetCapture makes the reservation Admit makes a capture of kind c.
func (c *RequestContext) SetCapture(kind Capture) { c.capture = kind }

// CaptureOf is how a live reservation is ended (CaptureNone if r has
// ended).
func (e *Engine) CaptureOf(r Reservation) Capture {
	if rs := e.res.lookup(r); rs != nil {
		return rs.capture
	}
	return CaptureNone
}

// lapseUnits is what a committed reservation bills when it ends without a
// finish: its quote, or nothing for a CaptureRelease.
func (rs *resSlot) lapseUnits() CostUnits {
	if rs.capture == CaptureRelease {
		return 0
	}
	return rs.quote
}
