package agentadmission

import (
	"encoding/json"
	"time"
)

// Decision is the outcome of one admission check. The zero value admits.
type Decision struct {
	// Denied is true only when the platform answered "deny".
	Denied bool
	// Reason, Scope and Window are the platform's, as sent.
	Reason string
	Scope  string
	Window string
	// ResetAt is when the deny lifts; zero when the platform sent null.
	ResetAt time.Time
	// Cached is true when the answer was stored before this check began.
	// A check that waited for another request's call gets a fresh answer.
	Cached bool
	// FailedOpen is true for the admit that stands in for a failed call.
	FailedOpen bool
}

// RetryAfter returns the Retry-After seconds for a deny at now: the time
// left until ResetAt rounded up to whole seconds, and 0 once it is past.
// ok is false when there is no ResetAt, and the header is then left out.
func (d Decision) RetryAfter(now time.Time) (secs int64, ok bool) {
	if d.ResetAt.IsZero() {
		return 0, false
	}
	left := d.ResetAt.Sub(now)
	if left <= 0 {
		return 0, true
	}
	// Round up: a client retrying after the rounded-down value would
	// arrive while the deny still holds.
	return int64((left + time.Second - 1) / time.Second), true
}

// denyBody is the 402 body. reset_at is a pointer so that "no reset" is
// written as null, which is what the contract promises callers.
type denyBody struct {
	Error   string     `json:"error"`
	Reason  string     `json:"reason"`
	Scope   string     `json:"scope"`
	Window  string     `json:"window"`
	ResetAt *time.Time `json:"reset_at"`
}

// body returns the JSON body of a 402 for d.
func (d Decision) body() []byte {
	b, err := json.Marshal(denyBody{
		Error:   "admission_denied",
		Reason:  d.Reason,
		Scope:   d.Scope,
		Window:  d.Window,
		ResetAt: d.resetAt(),
	})
	if err != nil {
		// Only a time outside years 0-9999 fails to marshal, and the
		// parser accepts none; keep the deny rather than lose it.
		return []byte(`{"error":"admission_denied"}`)
	}
	return b
}

func (d Decision) resetAt() *time.Time {
	if d.ResetAt.IsZero() {
		return nil
	}
	t := d.ResetAt
	return &t
}
