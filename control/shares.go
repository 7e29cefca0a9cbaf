package control

import (
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/shard"
)

// Shares split each of an account's node-wide limits over shards so that
// they never sum to more than the limit: the node admits at most the limit
// whichever shards the traffic lands on. Shares follow demand: a shard that
// runs out of its share reports it, and the plane moves share to the busy
// shards from the idle ones. Moving is two-phase — shrink the idle shards,
// wait for every acknowledgement, only then grow the busy ones — so the sum
// stays within the limit at every instant, not just eventually.

// field reads or writes one limit of a Share or Limits by index, so the
// split is written once for all five.
const numFields = 5

func limitFields(l *core.Limits) [numFields]uint32 {
	return [numFields]uint32{l.RequestRate, l.RequestBurst, l.UnitRate, l.UnitBurst, l.MaxConcurrent}
}

func shareFields(s core.Share) [numFields]uint32 {
	return [numFields]uint32{s.RequestRate, s.RequestBurst, s.UnitRate, s.UnitBurst, s.MaxConcurrent}
}

func fromFields(f [numFields]uint32) core.Share {
	return core.Share{RequestRate: f[0], RequestBurst: f[1], UnitRate: f[2], UnitBurst: f[3], MaxConcurrent: f[4]}
}

// split divides total over n shards: busy shards share what the idle ones'
// floor leaves, the first busy shard also taking the remainder.
func split(total uint32, busy []bool, floorPercent uint32) []uint32 {
	n := len(busy)
	out := make([]uint32, n)
	nBusy := 0
	for _, b := range busy {
		if b {
			nBusy++
		}
	}
	if nBusy == 0 {
		for i := range out {
			out[i] = total / uint32(n)
		}
		out[0] += total % uint32(n)
		return out
	}
	floor := uint32(uint64(total) * uint64(floorPercent) / 100 / uint64(n))
	rest := total - floor*uint32(n-nBusy)
	first := true
	for i, b := range busy {
		switch {
		case !b:
			out[i] = floor
		case first:
			out[i] = rest/uint32(nBusy) + rest%uint32(nBusy)
			first = false
		default:
			out[i] = rest / uint32(nBusy)
		}
	}
	return out
}

func planShares(l *core.Limits, busy []bool, floorPercent uint32) []core.Share {
	totals := limitFields(l)
	n := len(busy)
	cols := make([][]uint32, numFields)
	for f, t := range totals {
		cols[f] = split(t, busy, floorPercent)
	}
	out := make([]core.Share, n)
	for i := range n {
		var f [numFields]uint32
		for k := range numFields {
			f[k] = cols[k][i]
		}
		out[i] = fromFields(f)
	}
	return out
}

func equalShares(l *core.Limits, n int) []core.Share {
	return planShares(l, make([]bool, n), 0)
}

// starved notes that shard from ran out of its share of account id, and
// rebalances unless a rebalance is already under way.
func (p *Plane) starved(from int, id core.AccountID) {
	a := p.accounts[id]
	if a == nil {
		return
	}
	a.lastStarved[from] = p.cfg.Now()
	if a.shrinking > 0 {
		a.again = true
		return
	}
	p.rebalance(id, a)
}

func (p *Plane) rebalance(id core.AccountID, a *account) {
	now := p.cfg.Now()
	busy := make([]bool, len(p.links))
	for i, t := range a.lastStarved {
		busy[i] = t != 0 && now-t < int64(p.cfg.StarveWindow)
	}
	target := planShares(&a.snap.Limits, busy, p.cfg.IdleFloorPercent)
	p.stats.Rebalances++
	a.planSeq++
	a.plan = target
	a.again = false
	// Phase one: every shard whose share of any limit falls gets the
	// smaller of old and new for each limit, and must acknowledge.
	for i := range p.links {
		oldF, newF := shareFields(a.shares[i]), shareFields(target[i])
		shrink, lower := false, oldF
		for k := range numFields {
			if newF[k] < oldF[k] {
				lower[k], shrink = newF[k], true
			}
		}
		if shrink {
			a.shares[i] = fromFields(lower)
			a.shrinking++
			p.send(i, shard.Inbound{Kind: shard.InShare, Account: id, Share: a.shares[i], Seq: a.planSeq})
		}
	}
	if a.shrinking == 0 {
		p.grow(id, a)
	}
}

// shareAck completes phase one for one shard.
func (p *Plane) shareAck(from int, m *shard.Outbound) {
	a := p.accounts[m.Account]
	if a == nil {
		return
	}
	a.inFlight[from] = m.InFlight
	if m.Seq != a.planSeq || a.shrinking == 0 {
		return // an acknowledgement of an earlier plan, or of an install
	}
	if a.shrinking--; a.shrinking == 0 {
		p.grow(id(m), a)
	}
}

func id(m *shard.Outbound) core.AccountID { return m.Account }

// grow is phase two: hand out the planned shares, keeping concurrency
// within the limit when shrunk shards still hold more in flight than their
// new share (those slots are not free yet; a later rebalance hands them on).
func (p *Plane) grow(id core.AccountID, a *account) {
	limit := a.snap.Limits.MaxConcurrent
	var held uint32
	for i := range p.links {
		if shareFields(a.plan[i])[4] <= shareFields(a.shares[i])[4] {
			held += max(a.shares[i].MaxConcurrent, a.inFlight[i])
		}
	}
	for i := range p.links {
		cur, want := a.shares[i], a.plan[i]
		grows := shareFields(want) != shareFields(cur)
		if !grows {
			continue
		}
		if want.MaxConcurrent > cur.MaxConcurrent {
			room := uint32(0)
			if limit > held {
				room = limit - held
			}
			want.MaxConcurrent = min(want.MaxConcurrent, room)
			held += want.MaxConcurrent
		}
		a.shares[i] = want
		p.send(i, shard.Inbound{Kind: shard.InShare, Account: id, Share: want, Seq: a.planSeq})
	}
	if a.again {
		p.rebalance(id, a)
	}
}
