package shares

import (
	"testing"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

// sent records the messages for shards, in order.
type sent struct{ msgs []sentMsg }

type sentMsg struct {
	to int
	m  message.Inbound
}

func (s *sent) Send(to int, m message.Inbound) { s.msgs = append(s.msgs, sentMsg{to, m}) }

func (s *sent) take() []sentMsg {
	out := s.msgs
	s.msgs = nil
	return out
}

// TestAnUnacknowledgedShrinkIsSentAgainUntilTheMoveCompletes: a share move
// whose shrink gets no acknowledgement sends it again every AckTimeout,
// grows nothing meanwhile (the shares never sum past the limit), and
// completes once the acknowledgement of the current plan arrives; late or
// repeated acknowledgements change nothing.
func TestAnUnacknowledgedShrinkIsSentAgainUntilTheMoveCompletes(t *testing.T) {
	out := &sent{}
	m := New(Config{Shards: 2, AckTimeout: 1e9}, out)
	const id = core.AccountID("acme")
	limits := core.Limits{RequestRate: 100, RequestBurst: 100}
	m.Limits(id, limits, 0)
	install := out.take()
	if len(install) != 2 || install[0].m.Share.RequestRate != 50 || install[1].m.Share.RequestRate != 50 {
		t.Fatalf("a new account's limits are split equally: %+v", install)
	}

	// Shard 0 runs out: shard 1 (idle) must shrink before shard 0 grows.
	m.Starved(0, id, 1e6)
	shrink := out.take()
	if len(shrink) != 1 || shrink[0].to != 1 || shrink[0].m.Share.RequestRate >= 50 {
		t.Fatalf("the move's first phase: %+v, want one shrink for shard 1", shrink)
	}
	seq := shrink[0].m.Seq
	if next := m.Next(); next != 1e6+1e9 {
		t.Fatalf("Next = %d, want the shrink's timeout at %d", next, int64(1e6+1e9))
	}

	// No acknowledgement: before the timeout nothing happens, after it the
	// same shrink goes again, and again a timeout later.
	m.Tick(1e6 + 1e9 - 1)
	if msgs := out.take(); len(msgs) != 0 {
		t.Fatalf("resent before the timeout: %+v", msgs)
	}
	for i, now := range []int64{1e6 + 1e9, 1e6 + 2e9} {
		m.Tick(now)
		again := out.take()
		if len(again) != 1 || again[0].to != 1 || again[0].m.Seq != seq || again[0].m.Share != shrink[0].m.Share {
			t.Fatalf("resend %d: %+v, want the same shrink", i+1, again)
		}
		if m.Stats().Resent != uint64(i+1) {
			t.Fatalf("Resent = %d after %d resends", m.Stats().Resent, i+1)
		}
	}

	// An acknowledgement of an earlier plan (the install) is not this one.
	m.Ack(1, id, seq-1, 0, 1e6+2e9+1)
	if msgs := out.take(); len(msgs) != 0 || m.Next() == 0 {
		t.Fatalf("an old plan's acknowledgement moved the share: %+v", msgs)
	}

	// The acknowledgement arrives: shard 0 grows, within the limit, and
	// the move is over.
	m.Ack(1, id, seq, 0, 1e6+2e9+2)
	grow := out.take()
	if len(grow) != 1 || grow[0].to != 0 || grow[0].m.Share.RequestRate <= 50 {
		t.Fatalf("the move's second phase: %+v, want shard 0 grown", grow)
	}
	if sum := grow[0].m.Share.RequestRate + shrink[0].m.Share.RequestRate; sum > limits.RequestRate {
		t.Fatalf("shares sum to %d, past the limit %d", sum, limits.RequestRate)
	}
	if next := m.Next(); next != 0 {
		t.Fatalf("Next = %d after the move completed, want 0", next)
	}
	m.Ack(1, id, seq, 0, 1e6+3e9) // a repeat
	m.Tick(1e6 + 5e9)
	if msgs := out.take(); len(msgs) != 0 {
		t.Fatalf("a completed move sent %+v", msgs)
	}
}
