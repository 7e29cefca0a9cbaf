package shard

import (
	"testing"

	"github.com/tollgated/tollgated/control/message"
)

// TestPendingOutCoalesces: while the ring to the plane has no room, the
// pending list holds one message per (kind, account) for the kinds that
// coalesce — returns per lease, acknowledgements, refills and starvation
// reports — however many are sent, and nothing is lost: the returns' units
// add up, and the latest acknowledgement wins.
func TestPendingOutCoalesces(t *testing.T) {
	h := newHarness(t, 0, 8)
	for h.s.trySend(message.Outbound{Kind: message.OutKeyUsed}) { // fill the ring up to the usage reserve
	}
	for i := range 100 {
		h.s.sendReliably(message.Outbound{Kind: message.OutStarved, Account: "a"})
		h.s.sendReliably(message.Outbound{Kind: message.OutRefill, Account: "a", Seq: uint64(i)})
		h.s.sendReliably(message.Outbound{Kind: message.OutShareAck, Account: "a", Seq: uint64(i)})
		h.s.returnUnits("a", 7, 3)
		h.s.returnUnits("a", 8, 1)
	}
	if n := len(h.s.pendingOut); n != 5 {
		t.Fatalf("%d messages pending for 5 (kind, account, lease) keys: %+v", n, h.s.pendingOut)
	}
	for _, m := range h.s.pendingOut {
		switch {
		case m.Kind == message.OutReturn && m.Token == 7 && m.Units != 300,
			m.Kind == message.OutReturn && m.Token == 8 && m.Units != 100,
			(m.Kind == message.OutRefill || m.Kind == message.OutShareAck) && m.Seq != 99:
			t.Fatalf("coalesced badly: %+v", m)
		}
	}
}
