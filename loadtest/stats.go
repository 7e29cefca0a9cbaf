package loadtest

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Transport error classes, as reported in Result.TransportErrorsByClass.
const (
	errConnect  = "connect"  // dial failed
	errTimeout  = "timeout"  // no complete response within the timeout
	errClosed   = "closed"   // peer closed or reset the connection
	errProtocol = "protocol" // the response could not be parsed
	errWrite    = "write"    // writing the request failed
)

// classifyReadErr maps a read error to its class. Anything that is neither
// a timeout nor a closed connection is taken for a malformed response.
func classifyReadErr(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return errTimeout
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed):
		return errClosed
	default:
		return errProtocol
	}
}

// maxCodes bounds the number of distinct problem codes kept per connection,
// so a server that puts request ids into "code" cannot grow memory.
const maxCodes = 64

const otherCode = "(other)"

// histSet holds the latency histograms of a few connections. An
// HdrHistogram with nanosecond resolution over a run's length at three
// significant digits is a few hundred KB; one per connection and endpoint
// would cost gigabytes at thousands of connections, so connections share a
// set (a handful per CPU) behind a mutex that is rarely contended.
type histSet struct {
	mu      sync.Mutex
	highest int64
	kinds   [numKinds]*hdrhistogram.Histogram
	lag     *hdrhistogram.Histogram
	sample  func(k kind, ns int64) // test hook: every recorded latency
}

func newHistSet(highest int64, sample func(kind, int64)) *histSet {
	return &histSet{highest: highest, sample: sample}
}

func newHistogram(highest int64) *hdrhistogram.Histogram {
	return hdrhistogram.New(1, highest, 3)
}

// clamp keeps v in the trackable range; a latency longer than the run
// cannot happen, so the top clamp only guards against clock oddities.
func (s *histSet) clamp(v int64) int64 {
	return max(1, min(v, s.highest))
}

func (s *histSet) record(k kind, ns int64) {
	ns = s.clamp(ns)
	s.mu.Lock()
	h := s.kinds[k]
	if h == nil {
		h = newHistogram(s.highest)
		s.kinds[k] = h
	}
	_ = h.RecordValue(ns) // in range by clamp
	if s.sample != nil {
		s.sample(k, ns)
	}
	s.mu.Unlock()
}

func (s *histSet) recordLag(ns int64) {
	ns = s.clamp(ns)
	s.mu.Lock()
	if s.lag == nil {
		s.lag = newHistogram(s.highest)
	}
	_ = s.lag.RecordValue(ns)
	s.mu.Unlock()
}

// recorder holds the counts of one connection. It is owned by the
// goroutine reading responses; the run merges recorders after every
// connection has stopped.
type recorder struct {
	hs        *histSet
	status    [600]int64 // index 0 collects out-of-range statuses
	codes     map[string]*int64
	decisions map[string]*int64
	errs      map[string]int64
	invalid   int64 // responses the scenario could not continue from
	ops       int64 // operations finished in the measured window
	abandoned int64 // in flight when an interrupted run stopped

	// live counters for the progress line, read by another goroutine.
	liveResponses atomic.Int64
	liveErrors    atomic.Int64
}

func newRecorder(hs *histSet) *recorder {
	return &recorder{
		hs:        hs,
		codes:     make(map[string]*int64),
		decisions: make(map[string]*int64),
		errs:      make(map[string]int64),
	}
}

// response records one response of kind k with latency ns. measured is
// false during warm-up: the response still feeds the progress line but not
// the result.
func (r *recorder) response(k kind, status int, ns int64, measured bool) {
	r.liveResponses.Add(1)
	if !measured {
		return
	}
	r.hs.record(k, ns)
	if status < 100 || status >= len(r.status) {
		status = 0
	}
	r.status[status]++
}

func (r *recorder) code(c []byte) {
	count(r.codes, c)
}

func (r *recorder) decision(d []byte) {
	count(r.decisions, d)
}

// count increments m[key] without allocating when key is already present.
func count(m map[string]*int64, key []byte) {
	if p, ok := m[string(key)]; ok {
		*p++
		return
	}
	k := string(key)
	if len(m) >= maxCodes {
		k = otherCode
		if p, ok := m[k]; ok {
			*p++
			return
		}
	}
	n := int64(1)
	m[k] = &n
}

// transportErr records n requests lost to an error of class c.
func (r *recorder) transportErr(c string, n int64, measured bool) {
	r.liveErrors.Add(n)
	if measured {
		r.errs[c] += n
	}
}
