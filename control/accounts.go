package control

import (
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/shard"
)

// account is the plane's view of one account across shards.
type account struct {
	snap      *core.Snapshot
	evidence  *core.EvidenceCell
	grantSeq  []uint64         // per shard: sequence of the last grant sent
	slice     []core.CostUnits // per shard: what its next refill asks for
	lastGrant []int64          // per shard: when it was last granted

	shares      []core.Share // per shard: what the shard enforces (or will, once acked)
	lastStarved []int64      // per shard
	inFlight    []uint32     // per shard, from the last share ack
	starving    []bool       // per shard: refused funding, waiting for returns
	reclaiming  bool         // other shards were asked to hand back units
	lastReclaim int64
	shrinking   int // shrink acks outstanding in the current rebalance
	planSeq     uint64
	plan        []core.Share // the growth to send once every shrink is acked
	again       bool         // starvation arrived mid-rebalance: rebalance once more
}

// Install publishes snap to every shard: a new account, or a newer policy.
// It funds nothing: Prefund (or the shards' first refill) does.
func (p *Plane) Install(snap *core.Snapshot) error {
	if err := snap.Validate(); err != nil {
		return err
	}
	var err error
	p.Do(func() { err = p.install(snap) })
	return err
}

func (p *Plane) install(snap *core.Snapshot) error {
	n := len(p.links)
	a := p.accounts[snap.Account]
	fresh := a == nil
	if fresh {
		a = &account{
			evidence:    new(core.EvidenceCell),
			grantSeq:    make([]uint64, n),
			slice:       make([]core.CostUnits, n),
			lastGrant:   make([]int64, n),
			lastStarved: make([]int64, n),
			inFlight:    make([]uint32, n),
			starving:    make([]bool, n),
		}
		p.accounts[snap.Account] = a
	} else if snap.Generation <= a.snap.Generation {
		return core.ErrOlderGeneration
	}
	a.snap = snap
	p.broadcast(shard.Inbound{Kind: shard.InInstall, Snap: snap})
	if fresh {
		p.broadcast(shard.Inbound{Kind: shard.InEvidence, Account: snap.Account, Evidence: a.evidence})
	} else {
		// A policy change may change the budget view: old evidence must not
		// refuse under the new policy.
		a.evidence.Clear()
	}
	if !fresh {
		// New limits are split like any rebalance: shrink first, then grow,
		// so the shares never sum past either the old or the new limit.
		if a.shrinking > 0 {
			a.again = true
		} else {
			p.rebalance(snap.Account, a)
		}
		return nil
	}
	a.shares = equalShares(&snap.Limits, n)
	a.planSeq++
	for i := range n {
		p.send(i, shard.Inbound{Kind: shard.InShare, Account: snap.Account, Share: a.shares[i], Seq: a.planSeq})
	}
	return nil
}

// Prefund gives every shard that holds no funding for id a slice now, so
// the account's first request does not wait for the ledger. Accounts that
// only ever report post-paid usage are never prefunded: a lease would hold
// budget their reports need.
func (p *Plane) Prefund(id core.AccountID) {
	p.Do(func() {
		a := p.accounts[id]
		if a == nil {
			return
		}
		for i := range p.links {
			if a.grantSeq[i] == 0 {
				p.grant(i, id, a, 0)
			}
		}
	})
}

// BindKey lets the key with digest d act for account on every shard.
func (p *Plane) BindKey(d credential.Digest, id core.AccountID) {
	p.Do(func() {
		p.broadcast(shard.Inbound{Kind: shard.InBind, Principal: d.Principal(), Digest: d, Account: id})
	})
}

// RevokeKey stops the key with digest d on every shard.
func (p *Plane) RevokeKey(d credential.Digest) {
	p.Do(func() { p.broadcast(shard.Inbound{Kind: shard.InUnbind, Principal: d.Principal()}) })
}

// BindPlatformToken lets the platform token with digest d call the seed-000
// routes on every shard; RevokePlatformToken stops it.
func (p *Plane) BindPlatformToken(d credential.Digest) {
	p.Do(func() { p.broadcast(shard.Inbound{Kind: shard.InBindPlatform, Principal: d.Principal(), Digest: d}) })
}

func (p *Plane) RevokePlatformToken(d credential.Digest) {
	p.Do(func() { p.broadcast(shard.Inbound{Kind: shard.InUnbindPlatform, Principal: d.Principal()}) })
}

// MarkReady tells every shard its initial state is delivered.
func (p *Plane) MarkReady() { p.Do(func() { p.broadcast(shard.Inbound{Kind: shard.InReady}) }) }

// Snapshot returns the stats so far.
func (p *Plane) Stats() Stats {
	var s Stats
	p.Do(func() { s = p.stats })
	return s
}

// refill answers a shard's request for more funding, unless the shard has
// not yet applied the last grant it was sent (its request is then stale).
func (p *Plane) refill(from int, m *shard.Outbound) {
	a := p.accounts[m.Account]
	if a == nil || m.Seq < a.grantSeq[from] {
		return
	}
	p.stats.Refills++
	p.grant(from, m.Account, a, m.Needed)
}

func (p *Plane) grant(to int, id core.AccountID, a *account, need core.CostUnits) {
	now := p.cfg.Now()
	g, err := p.funder.Grant(id, p.nextSlice(a, to, now), need, now)
	if err != nil {
		p.stats.GrantErrors++
		return
	}
	if g.HasEvidence {
		a.evidence.Store(g.Evidence)
	}
	if g.Units == 0 {
		// The balance is spoken for, possibly by other shards' slices: ask
		// them to hand back what they have not spent, and fund this shard
		// from the returns.
		a.starving[to] = true
		// Reclaiming is worth it only if units are out in other slices, and
		// at most once per interval: refused shards keep asking on their
		// own, so a pass that finds nothing must not loop.
		if !a.reclaiming && g.HasEvidence && g.Evidence.Remaining > 0 && now-a.lastReclaim >= reclaimInterval {
			a.reclaiming, a.lastReclaim = true, now
			for i := range p.links {
				if i != to {
					p.send(i, shard.Inbound{Kind: shard.InReclaimLease, Account: id})
				}
			}
		}
		return
	}
	p.stats.Grants++
	a.grantSeq[to]++
	a.lastGrant[to] = now
	// Ask for more while half the slice is left, so a busy shard's refill
	// arrives before it runs dry.
	p.send(to, shard.Inbound{Kind: shard.InGrant, Account: id, Token: g.Token, Units: g.Units,
		Until: g.Until, LowWater: g.Units / 2, Seq: a.grantSeq[to]})
}

// Shutdown asks every shard to hand back its unspent lease units; the
// returns arrive as OutReturn messages the plane passes to the funder.
func (p *Plane) ReclaimLeases() {
	p.Do(func() {
		for id := range p.accounts {
			p.broadcast(shard.Inbound{Kind: shard.InReclaimLease, Account: id})
		}
	})
}

// reclaimInterval bounds how often one account's slices are reclaimed.
const reclaimInterval = int64(10e6)

// fundStarving retries the grants of shards that found the balance spoken
// for, once units come back.
func (p *Plane) fundStarving(id core.AccountID) {
	a := p.accounts[id]
	if a == nil {
		return
	}
	a.reclaiming = false
	for i, starving := range a.starving {
		if starving {
			a.starving[i] = false
			p.grant(i, id, a, 0)
		}
	}
}

// nextSlice sizes shard to's next grant from how fast it spent the last.
func (p *Plane) nextSlice(a *account, to int, now int64) core.CostUnits {
	s := a.slice[to]
	switch since := now - a.lastGrant[to]; {
	case s == 0:
		s = p.cfg.Slice
	case since < int64(p.cfg.SliceFast):
		s = min(2*s, p.cfg.MaxSlice)
	case since > int64(p.cfg.SliceSlow):
		s = max(s/2, p.cfg.Slice)
	}
	a.slice[to] = s
	return s
}

// publishEvidence stores the ledger's latest word on id's funding where its
// shards read it.
func (p *Plane) publishEvidence(id core.AccountID, ev core.FundingEvidence) {
	if a := p.accounts[id]; a != nil {
		a.evidence.Store(ev)
	}
}

// rotated follows a node lease being superseded or retired: shards that
// held slices of the old lease get slices of the new one first (when
// regrant), then every shard is asked for what it holds of the old one.
func (p *Plane) rotated(id core.AccountID, old uint64, regrant bool) {
	a := p.accounts[id]
	if a == nil {
		return
	}
	if regrant {
		for i := range p.links {
			if a.grantSeq[i] > 0 {
				p.grant(i, id, a, 0)
			}
		}
	}
	p.reclaimToken(id, old)
}

// reclaimToken asks every shard for its unspent units of lease token.
func (p *Plane) reclaimToken(id core.AccountID, token uint64) {
	p.broadcast(shard.Inbound{Kind: shard.InReclaimLease, Account: id, Token: token})
}

// ReleaseLeases hands every node lease back to the ledger once the shards
// have returned their slices (after ReclaimLeases). It reports false when
// the plane is not funded by a ledger.
func (p *Plane) ReleaseLeases() bool {
	if p.ledger == nil {
		return false
	}
	p.Do(func() { p.ledger.ReleaseAll() })
	return true
}

// LeasesReleased reports whether no node lease is left and no ledger call
// is in flight.
func (p *Plane) LeasesReleased() bool {
	if p.ledger == nil {
		return true
	}
	var done bool
	p.Do(func() {
		_, leases, pending := p.ledger.Outstanding()
		done = leases == 0 && pending == 0
	})
	return done
}

// Report is the plane's state for scrapers.
type Report struct {
	Stats      Stats
	Funding    FundingStats
	Durability DurabilityStats
	// RingIn and RingOut are each shard's ring depths (plane → shard, and
	// shard → plane); Backlog what waits for room in RingIn.
	RingIn, RingOut, Backlog []int
}

// Report collects the plane's counters on its goroutine.
func (p *Plane) Report() Report {
	var r Report
	p.Do(func() {
		r.Stats = p.stats
		if p.ledger != nil {
			r.Funding = p.ledger.Stats()
		}
		if p.durable != nil {
			r.Durability = p.durable.stats
		}
		for i, l := range p.links {
			r.RingIn = append(r.RingIn, l.In.Ring().Len())
			r.RingOut = append(r.RingOut, l.Out.Ring().Len())
			r.Backlog = append(r.Backlog, len(p.backlog[i]))
		}
	})
	return r
}
