package fleet

import (
	"slices"

	"github.com/tollgated/tollgated/core"
)

// RefreshCadence is the policy of Funds, apart from its clock and its
// reads: it gathers funds announcements and says when the next read of
// funding evidence may start. One read starts at most once per Every (ns),
// and no sooner after one ended than that one took, however many
// announcements arrive and however many nodes send them — so a node's
// reads are bounded by its own cadence, not by the fleet's settlements. An
// announcement arriving after a quiet Every is read at once.
//
// A pure state machine (times are arguments; no I/O); not safe for
// concurrent use.
type RefreshCadence struct {
	// Every is the least time between the starts of two reads
	// (DefaultFundsEvery if 0).
	Every int64

	pending map[core.AccountID]bool
	// all: everything is pending besides. Kept apart from pending, so a
	// full pass that keeps failing does not hold up the accounts named.
	all  bool
	next int64 // the earliest start of the next read
}

// maxPendingFunds bounds the accounts waiting for a refresh; past it, the
// next refresh reads every account instead of them.
const maxPendingFunds = 4096

// Note adds an announcement to what the next read covers: the accounts
// ids, or every account (all).
func (c *RefreshCadence) Note(ids []core.AccountID, all bool) {
	if c.pending == nil {
		c.pending = make(map[core.AccountID]bool)
	}
	if all {
		c.all = true
	}
	for _, id := range ids {
		if len(c.pending) >= maxPendingFunds {
			c.all = true // covers the rest
			break
		}
		c.pending[id] = true
	}
}

// Due is when the next read may start, if anything is pending.
func (c *RefreshCadence) Due() (at int64, pending bool) {
	return c.next, c.all || len(c.pending) > 0
}

// Take starts a read at now, if one is due: it returns and clears what is
// pending (ids in order), and holds the next read back until Every after
// now. ok is false, and nothing changes, while the cadence holds reads
// back or nothing is pending.
func (c *RefreshCadence) Take(now int64) (ids []core.AccountID, all, ok bool) {
	if due, pending := c.Due(); !pending || now < due {
		return nil, false, false
	}
	all, c.all = c.all, false
	for id := range c.pending {
		ids = append(ids, id)
	}
	clear(c.pending)
	slices.Sort(ids)
	c.next = now + c.every()
	return ids, all, true
}

// Done says the read started at started ended at now: the next one starts
// no sooner than it took after it (so reads hold at most half of a node's
// time with the ledger, however large the subtrees they read).
func (c *RefreshCadence) Done(started, now int64) {
	c.next = max(c.next, now+(now-started))
}

// Defer holds the next read back until at least t (a failed read's
// back-off).
func (c *RefreshCadence) Defer(t int64) { c.next = max(c.next, t) }

func (c *RefreshCadence) every() int64 {
	if c.Every <= 0 {
		return int64(DefaultFundsEvery)
	}
	return c.Every
}
