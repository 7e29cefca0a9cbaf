package loadtest

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestCountBoundsDistinctKeys(t *testing.T) {
	m := map[string]*int64{}
	for i := range maxCodes + 50 {
		count(m, []byte(fmt.Sprintf("code-%d", i)))
	}
	count(m, []byte("code-0"))
	if len(m) != maxCodes+1 {
		t.Errorf("%d keys, want %d plus %q", len(m), maxCodes, otherCode)
	}
	if *m["code-0"] != 2 || *m[otherCode] != 50 {
		t.Errorf("code-0 %d, other %d", *m["code-0"], *m[otherCode])
	}
}

func TestCountDoesNotAllocateForKnownKeys(t *testing.T) {
	m := map[string]*int64{}
	key := []byte("rate_limited")
	count(m, key)
	if a := testing.AllocsPerRun(100, func() { count(m, key) }); a != 0 {
		t.Errorf("%v allocations", a)
	}
}

func TestRecorderWarmupAndClamp(t *testing.T) {
	r := newRecorder(newHistSet(1000, nil))
	r.response(kindCheck, 200, 50, false)
	if r.hs.kinds[kindCheck] != nil || r.status[200] != 0 || r.liveResponses.Load() != 1 {
		t.Error("warm-up response recorded")
	}
	r.response(kindCheck, 200, 5000, true) // above the highest trackable
	r.response(kindCheck, 999, 0, true)    // odd status, zero latency
	h := r.hs.kinds[kindCheck]
	if h.TotalCount() != 2 || h.Max() < 1000 || r.status[200] != 1 || r.status[0] != 1 {
		t.Errorf("count %d max %d status %d/%d", h.TotalCount(), h.Max(), r.status[200], r.status[0])
	}
	r.transportErr(errTimeout, 3, false)
	r.transportErr(errTimeout, 2, true)
	if r.errs[errTimeout] != 2 || r.liveErrors.Load() != 5 {
		t.Errorf("errors %v live %d", r.errs, r.liveErrors.Load())
	}
}

func TestHistSetsAreShared(t *testing.T) {
	// Two connections on one set end up in one histogram.
	hs := newHistSet(1e9, nil)
	a, b := newRecorder(hs), newRecorder(hs)
	a.response(kindCheck, 200, 100, true)
	b.response(kindCheck, 200, 200, true)
	b.hs.recordLag(7)
	if hs.kinds[kindCheck].TotalCount() != 2 || hs.lag.TotalCount() != 1 {
		t.Errorf("shared set holds %d latencies, %d lags", hs.kinds[kindCheck].TotalCount(), hs.lag.TotalCount())
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyReadErr(t *testing.T) {
	cases := map[error]string{
		os.ErrDeadlineExceeded:                   errTimeout,
		&net.OpError{Err: timeoutErr{}}:          errTimeout,
		io.EOF:                                   errClosed,
		fmt.Errorf("x: %w", io.ErrUnexpectedEOF): errClosed,
		syscall.ECONNRESET:                       errClosed,
		net.ErrClosed:                            errClosed,
		fmt.Errorf("cannot parse status"):        errProtocol,
	}
	for err, want := range cases {
		if got := classifyReadErr(err); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}
