//go:build linux

package httploop

import "sync/atomic"

// CloseReason says why the loop closed a connection.
type CloseReason uint8

const (
	ClosePeer         CloseReason = iota // the client closed or reset it
	CloseIdle                            // no request within IdleTimeout
	CloseReadTimeout                     // a request missed HeaderTimeout or BodyTimeout (answered 408)
	CloseWriteTimeout                    // output made no progress within WriteTimeout
	CloseBadRequest                      // broken or refused framing (answered 400, 411, 413 or 431)
	CloseRequested                       // Connection: close, HTTP/1.0, or the handler asked
	CloseDrain                           // Drain
	CloseError                           // a socket error
	numCloseReasons
)

var closeReasonNames = [numCloseReasons]string{
	"peer", "idle", "read_timeout", "write_timeout", "bad_request", "requested", "drain", "error",
}

// String returns a stable lower-case name, suitable as a metric label.
func (r CloseReason) String() string {
	if r < numCloseReasons {
		return closeReasonNames[r]
	}
	return "unknown"
}

// Stats is a snapshot of a loop's counters. Counters only grow; Conns and
// OutputBuffered are gauges.
type Stats struct {
	Accepted       uint64 // connections accepted and kept
	Rejected       uint64 // connections accepted and closed at once: MaxConns reached
	AcceptErrors   uint64 // accept(2) failures other than "nothing to accept"
	Requests       uint64 // requests handed to the handler
	Deferred       uint64 // of those, answers the handler deferred
	DeferTimeouts  uint64 // deferred answers the loop gave itself (504)
	BytesIn        uint64
	BytesOut       uint64
	Conns          uint64 // connections open now
	OutputBuffered uint64 // response bytes waiting for their sockets now
	SendBatches    uint64 // io_uring submissions of answers (0 when every answer is its own write)
	BatchedSends   uint64 // answers sent through those submissions
	Closed         [numCloseReasons]uint64
}

// Indexes of the counters in counters.v, in Stats order.
const (
	statAccepted = iota
	statRejected
	statAcceptErrors
	statRequests
	statDeferred
	statDeferTimeouts
	statBytesIn
	statBytesOut
	statConns
	statOutput
	statSendBatches
	statBatchedSends
	statClosed
	numStats = statClosed + int(numCloseReasons)
)

// counters are kept by the loop thread in plain memory and published to
// atomics once per iteration, and only those that changed, so a request
// costs plain increments and a scraper still never sees a torn value.
type counters struct {
	v    [numStats]uint64 // the loop's working copy; loop thread only
	seen [numStats]uint64 // what was last published; loop thread only
	pub  *published
}

// published lives in its own allocation, padded, so that a scraper reading
// it never shares a cache line with the loop's working state.
type published struct {
	_ [64]byte
	v [numStats]atomic.Uint64
	_ [64]byte
}

func (c *counters) init() {
	c.pub = new(published)
}

// publish stores every counter that changed since the last call.
func (c *counters) publish() {
	for i := range c.v {
		if c.v[i] != c.seen[i] {
			c.seen[i] = c.v[i]
			c.pub.v[i].Store(c.v[i])
		}
	}
}

// snapshot reads the published values; any goroutine.
func (p *published) snapshot() Stats {
	var s Stats
	f := [...]*uint64{
		&s.Accepted, &s.Rejected, &s.AcceptErrors, &s.Requests, &s.Deferred,
		&s.DeferTimeouts, &s.BytesIn, &s.BytesOut, &s.Conns, &s.OutputBuffered,
		&s.SendBatches, &s.BatchedSends,
	}
	for i, dst := range f {
		*dst = p.v[i].Load()
	}
	for r := range s.Closed {
		s.Closed[r] = p.v[statClosed+r].Load()
	}
	return s
}
