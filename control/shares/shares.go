// Package shares splits each of an account's node-wide limits — request
// rate and burst, unit rate and burst, concurrency — over the shards, so
// that the shares never sum to more than the limit: the node admits at most
// the limit whichever shards the traffic lands on. Shares follow demand: a
// shard that runs out of its share says so (Starved), and share moves from
// idle shards to busy ones.
//
// Moving is two-phase — shrink the shards that lose share, wait for every
// acknowledgement, only then grow the ones that gain — so the sum stays
// within the limit at every instant, not just eventually. A shrink that is
// not acknowledged within AckTimeout is sent again (acknowledgements are
// not dropped, so this is a safety net, not the protocol), and a move never
// waits forever.
//
// Like the other parts of the control plane it is a pure state machine:
// methods are inputs, Out receives the messages for shards, Next and Tick
// carry time.
package shares

import (
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/invariant"
)

// Config sets the policy. Times are nanoseconds; zero picks the default.
type Config struct {
	Shards int
	// StarveWindow is how recently a shard must have run out of its share
	// to count as busy (250 ms).
	StarveWindow int64
	// IdleFloorPercent of each limit is spread over idle shards, so the
	// first request on an idle shard is not refused; the busy shards share
	// the rest (2).
	IdleFloorPercent uint32
	// AckTimeout: a shrink unacknowledged this long is sent again (1 s).
	AckTimeout int64
}

// Out receives the share messages.
type Out interface {
	Send(shard int, m message.Inbound)
}

// Stats counts moves.
type Stats struct {
	Rebalances, Resent uint64
}

// Machine holds every account's shares.
type Machine struct {
	cfg      Config
	out      Out
	accounts map[core.AccountID]*account
	moving   []*account // accounts with shrinks unacknowledged, in start order
	stats    Stats
}

type account struct {
	id          core.AccountID
	limits      core.Limits
	shares      []core.Share // what each shard enforces (or will, once acknowledged)
	lastStarved []int64
	inFlight    []uint32 // per shard, from its last acknowledgement
	acked       []bool   // per shard: acknowledged the current plan's shrink
	shrinking   int      // shrink acknowledgements outstanding
	planSeq     uint64
	plan        []core.Share // the growth to send once every shrink is acknowledged
	again       bool         // starvation or new limits arrived mid-move: move once more
	sentAt      int64        // when the current shrinks were sent
}

// New returns an empty machine.
func New(cfg Config, out Out) *Machine {
	if cfg.Shards <= 0 {
		cfg.Shards = 1
	}
	if cfg.StarveWindow <= 0 {
		cfg.StarveWindow = 250e6
	}
	if cfg.IdleFloorPercent == 0 {
		cfg.IdleFloorPercent = 2
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 1e9
	}
	return &Machine{cfg: cfg, out: out, accounts: make(map[core.AccountID]*account)}
}

// Stats returns the counters.
func (m *Machine) Stats() Stats { return m.stats }

// Limits sets an account's limits: a new account's are split equally; new
// limits of a known account are moved to like any rebalance, shrink first.
func (m *Machine) Limits(id core.AccountID, l core.Limits, now int64) {
	n := m.cfg.Shards
	a := m.accounts[id]
	if a == nil {
		a = &account{id: id, limits: l, lastStarved: make([]int64, n), inFlight: make([]uint32, n), acked: make([]bool, n)}
		m.accounts[id] = a
		a.shares = equalShares(&l, n)
		a.planSeq++
		for i := range n {
			m.out.Send(i, message.Inbound{Kind: message.InShare, Account: id, Share: a.shares[i], Seq: a.planSeq})
		}
		return
	}
	if a.limits == l {
		return
	}
	a.limits = l
	if a.shrinking > 0 {
		a.again = true
		return
	}
	m.rebalance(a, now)
}

// Starved notes that shard from ran out of its share of id.
func (m *Machine) Starved(from int, id core.AccountID, now int64) {
	a := m.accounts[id]
	if a == nil || from < 0 || from >= len(a.shares) {
		return
	}
	a.lastStarved[from] = now
	if a.shrinking > 0 {
		a.again = true
		return
	}
	m.rebalance(a, now)
}

// Ack completes phase one for shard from: it applied plan seq and holds
// inFlight reservations of id.
func (m *Machine) Ack(from int, id core.AccountID, seq uint64, inFlight uint32, now int64) {
	a := m.accounts[id]
	if a == nil || from < 0 || from >= len(a.shares) {
		return
	}
	a.inFlight[from] = inFlight
	if seq != a.planSeq || a.shrinking == 0 || a.acked[from] {
		return // an acknowledgement of an earlier plan, of an install, or a repeat
	}
	a.acked[from] = true
	if a.shrinking--; a.shrinking == 0 {
		m.settled(a)
		m.grow(a, now)
	}
}

// Next is when Tick next has work: the earliest shrink to resend (0: none).
func (m *Machine) Next() int64 {
	var next int64
	for _, a := range m.moving {
		if at := a.sentAt + m.cfg.AckTimeout; next == 0 || at < next {
			next = at
		}
	}
	return next
}

// Tick resends the shrinks of moves unacknowledged for AckTimeout.
func (m *Machine) Tick(now int64) {
	for _, a := range m.moving {
		if now-a.sentAt < m.cfg.AckTimeout {
			continue
		}
		a.sentAt = now
		for i := range a.shares {
			if !a.acked[i] {
				m.stats.Resent++
				m.out.Send(i, message.Inbound{Kind: message.InShare, Account: a.id, Share: a.shares[i], Seq: a.planSeq})
			}
		}
	}
}

func (m *Machine) settled(a *account) {
	for i, x := range m.moving {
		if x == a {
			m.moving = append(m.moving[:i], m.moving[i+1:]...)
			return
		}
	}
}

func (m *Machine) rebalance(a *account, now int64) {
	busy := make([]bool, len(a.shares))
	for i, t := range a.lastStarved {
		busy[i] = t != 0 && now-t < m.cfg.StarveWindow
	}
	target := planShares(&a.limits, busy, m.cfg.IdleFloorPercent)
	m.stats.Rebalances++
	a.planSeq++
	a.plan = target
	a.again = false
	clear(a.acked)
	// Phase one: every shard whose share of any limit falls gets the
	// smaller of old and new for each limit, and must acknowledge.
	for i := range a.shares {
		oldF, newF := shareFields(a.shares[i]), shareFields(target[i])
		shrink, low := false, oldF
		for k := range numFields {
			if newF[k] < oldF[k] {
				low[k], shrink = newF[k], true
			}
		}
		if shrink {
			a.shares[i] = fromFields(low)
			a.shrinking++
			m.out.Send(i, message.Inbound{Kind: message.InShare, Account: a.id, Share: a.shares[i], Seq: a.planSeq})
		} else {
			a.acked[i] = true
		}
	}
	if a.shrinking == 0 {
		m.grow(a, now)
		return
	}
	a.sentAt = now
	m.moving = append(m.moving, a)
}

// grow is phase two: hand out the planned shares, keeping concurrency
// within the limit when shrunk shards still hold more in flight than their
// new share (those slots are not free yet; a later rebalance hands them on).
func (m *Machine) grow(a *account, now int64) {
	limit := a.limits.MaxConcurrent
	var held uint32
	for i := range a.shares {
		if a.plan[i].MaxConcurrent <= a.shares[i].MaxConcurrent {
			held += max(a.shares[i].MaxConcurrent, a.inFlight[i])
		}
	}
	for i := range a.shares {
		cur, want := a.shares[i], a.plan[i]
		if shareFields(want) == shareFields(cur) {
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
		m.out.Send(i, message.Inbound{Kind: message.InShare, Account: a.id, Share: want, Seq: a.planSeq})
	}
	m.checkSum(a)
	if a.again {
		m.rebalance(a, now)
	}
}

// checkSum asserts what the two phases exist for: no limit's shares sum
// past the limit.
func (m *Machine) checkSum(a *account) {
	var sum [numFields]uint64
	for _, s := range a.shares {
		for k, v := range shareFields(s) {
			sum[k] += uint64(v)
		}
	}
	for k, t := range limitFields(&a.limits) {
		if sum[k] > uint64(t) {
			invariant.Violated(invariant.ShareSum, "shares of a limit sum past the limit")
		}
	}
}

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

// split divides total over the shards: busy shards share what the idle
// ones' floor leaves, the first busy shard also taking the remainder.
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
	var cols [numFields][]uint32
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
