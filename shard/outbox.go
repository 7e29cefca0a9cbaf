package shard

import (
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

// Messages to the control plane that carry money or a protocol step —
// units returned from a lease, a share acknowledgement, a reply to a
// forwarded operation, a refill request — must never be lost. Usage has
// ring room reserved before any work is done (usage.go); these others are
// pushed when the ring has room beyond what usage reserved, and otherwise
// wait in the shard's pending list, which every Poll flushes first.
//
// The list coalesces: returns by (account, lease token), summing units;
// acknowledgements, refill requests and starvation reports by account,
// keeping the latest. So it holds at most one return per lease of each
// account (core.MaxRetiringLeases+1), one acknowledgement, one refill and
// one starvation report per account, plus one reply per forwarded
// operation in flight (bounded by the loop's deferred requests): its bound
// is the shard's own state, and at that bound nothing is dropped.

// sendReliably pushes m, or keeps it pending (coalesced) until the ring
// has room. It never drops m.
func (s *Shard) sendReliably(m message.Outbound) {
	if len(s.pendingOut) == 0 && s.trySend(m) {
		return
	}
	for i := range s.pendingOut {
		p := &s.pendingOut[i]
		if p.Kind != m.Kind || p.Account != m.Account {
			continue
		}
		switch m.Kind {
		case message.OutReturn:
			if p.Token == m.Token {
				p.Units += m.Units
				return
			}
		case message.OutShareAck, message.OutRefill, message.OutStarved:
			*p = m
			return
		}
	}
	s.pendingOut = append(s.pendingOut, m)
}

// trySend pushes m if the ring has room beyond the usage slots reserved.
func (s *Shard) trySend(m message.Outbound) bool {
	r := s.outbox.Ring()
	if r.Cap()-r.Len() <= s.usageReserved {
		return false
	}
	return s.send(m)
}

// flushPending pushes what waits, in order, while there is room.
func (s *Shard) flushPending() {
	n := 0
	for n < len(s.pendingOut) && s.trySend(s.pendingOut[n]) {
		n++
	}
	if n > 0 {
		clear(s.pendingOut[:n])
		s.pendingOut = append(s.pendingOut[:0], s.pendingOut[n:]...)
	}
}

// returnUnits hands units of lease token back to the control plane.
func (s *Shard) returnUnits(account core.AccountID, token uint64, units core.CostUnits) {
	if units == 0 {
		return
	}
	s.sendReliably(message.Outbound{Kind: message.OutReturn, From: s.cfg.ID, Account: account, Token: token, Units: units})
}
