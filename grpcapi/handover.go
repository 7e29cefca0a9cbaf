package grpcapi

import (
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgated/tollgated/handover"
)

// answerWait bounds how long a call waits for its shard's answer: a shard
// answers a postponed call 504 after the loop's DeferTimeout (5 s by
// default), so this only ends a call whose shard stopped answering at all.
const answerWait = 6 * time.Second

// shards carries forward-auth calls to the node's shards through their
// hand-over ports, at most max at once: a call beyond them is refused,
// not queued.
type shards struct {
	ports []*handover.Port
	max   int64
	next  atomic.Uint64 // the shard of a call without a hint
	stats *Stats        // its InFlight is the bound's count
}

// Stats are the hand-over's counters, for metrics: the calls handed over
// now and, by outcome, those that got no decision. The daemon makes them
// once and keeps them across the listener's life.
type Stats struct {
	// InFlight counts the calls handed over; a call about to be refused
	// busy is in it for the moment it takes to find out.
	InFlight atomic.Int64
	// Busy: refused with --grpc-hand-over calls already handed over;
	// Full: refused by a shard holding as many as it can; Stopping: the
	// shard had stopped; NoAnswer: no answer within 6 s (outcome
	// unknown).
	Busy, Full, Stopping, NoAnswer atomic.Uint64
}

// exchange hands c to a shard — the one hint names, so that one account's
// calls meet one shard's share of its funds — and returns the answer in
// c.Resp, or why there is none as a gRPC status. On an error c is gone:
// released, or abandoned to a shard that may still write it.
func (h *shards) exchange(c *handover.Call, hint string) error {
	if h.stats.InFlight.Add(1) > h.max {
		h.stats.InFlight.Add(-1)
		h.stats.Busy.Add(1)
		handover.Release(c)
		return status.Error(codes.ResourceExhausted, "tollgated: every hand-over slot to the shards is busy; retry")
	}
	err := h.ports[h.pick(hint)].Exchange(c, answerWait)
	h.stats.InFlight.Add(-1)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, handover.ErrNoAnswer):
		h.stats.NoAnswer.Add(1)
		return status.Error(codes.Unavailable, "tollgated: the data plane did not answer in time; the call's outcome is unknown (it may have been billed)")
	case errors.Is(err, handover.ErrFull):
		h.stats.Full.Add(1)
		handover.Release(c)
		return status.Error(codes.ResourceExhausted, "tollgated: the shard holds as many hand-overs as it can; nothing was decided, retry")
	default: // ErrClosed
		h.stats.Stopping.Add(1)
		handover.Release(c)
		return status.Error(codes.Unavailable, "tollgated: the data plane is stopping; the call was not decided")
	}
}

// pick is the shard for hint: FNV-1a of it, or the next shard in turn
// when there is none.
func (h *shards) pick(hint string) int {
	n := uint64(len(h.ports))
	if hint == "" {
		return int(h.next.Add(1) % n)
	}
	x := uint64(14695981039346656037)
	for i := 0; i < len(hint); i++ {
		x ^= uint64(hint[i])
		x *= 1099511628211
	}
	return int(x % n)
}
