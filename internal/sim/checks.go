package sim

import (
	"context"
	"strconv"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/fleet"
	"github.com/tollgated/tollgated/ledger"
)

// check runs after every step: the ledger conserves every account's units
// (L1 and the store's own checks), and every shard's lease slots theirs.
func (w *World) check() {
	if err := w.store.Check(context.Background()); err != nil {
		w.fail("step %d: ledger: %v", w.stats.Steps, err)
	}
	for _, n := range w.live() {
		for i, s := range n.shards {
			for _, a := range w.accounts {
				l, err := s.Engine().Lease(a.id)
				if err != nil {
					continue
				}
				if b := l.Balance(); !b.Conserved() {
					w.fail("step %d: %s shard %d, %s: lease slot %+v", w.stats.Steps, n, i, a.id, b)
				}
			}
		}
	}
}

// quiesce ends the faults: the ledger is back, disks have room, every
// spool keeps up, and the world runs on for a few seconds, so exports
// catch up and leases forfeited in an outage are settled by the nodes
// that held them.
func (w *World) quiesce() {
	w.cfg.Faults = Faults{} // a 503 is right while a ledger call is really outstanding
	w.outageUntil = 0
	for _, n := range w.nodes {
		n.sp.full = false
		n.storage.Set(shardStorageOK)
	}
	for range 30 {
		w.advance(100e6)
		for _, n := range w.nodes {
			n.sp.flush()
		}
	}
}

// The liveness check: money that exists is spendable.
//
// Fresh accounts, one per price, are funded with an amount that is not a
// multiple of it and spent from every node and every shard at once, in
// rounds: each request must be answered 200 or 402 within the funding
// wait. A 503 means a request the account could pay for waited out the
// whole wait, or was refused as transient while the units sat somewhere
// no request could use them. The rounds go on until every connection was
// refused 402; what is left then must be less than one request's price.
// Concurrent requests on every shard of every node split the last units
// over slices and leases, which is what used to strand them.
func (w *World) checkLiveness() {
	ctx := context.Background()
	for i, price := range []core.CostUnits{7, 13, 1} {
		id := core.AccountID("live-" + strconv.Itoa(i))
		if _, _, err := w.store.CreateAccount(ctx, ledger.AccountSpec{ID: id}, w.now); err != nil {
			w.fail("create %s: %v", id, err)
		}
		funded := core.CostUnits(50+w.rng.IntN(950)) * price
		funded += 1 + core.CostUnits(w.rng.Int64N(int64(price)))
		acct, _, err := w.store.Deposit(ctx, id, funded, "live", w.now)
		if err != nil {
			w.fail("deposit %s: %v", id, err)
		}
		w.setPolicy(id, price, 100, "")
		a := w.addAccount(id, "", price, false)
		a.deposited = funded
		if acct, err = w.store.Account(ctx, id); err != nil {
			w.fail("read %s: %v", id, err)
		}
		w.changed(acct)
		w.advance(50e6) // the other nodes' followers have read the change
		for _, n := range w.live() {
			n.prov.BindKey(digest(a.key), id)
			n.pump()
		}
		w.spendAll(a, price)
	}
}

// fleetBound is how long a fleet may answer a conn 503 in a row (a client
// told "transient" retries at once here) while the units it needs come
// back from other nodes' leases, or until it learns that they were spent
// there: their settlement (control.SettleEvery), this node's next read of
// funding evidence (fleet.DefaultFundsEvery), the probe's own funding
// wait, and 100 ms of ledger calls (docs/FLEET.md, "The bound").
func (w *World) fleetBound() int64 {
	return int64(control.SettleEvery+fleet.DefaultFundsEvery) + int64(w.cfg.FundingWait) + 100e6
}

// spendAll spends a from every shard of every node, in rounds of
// concurrent requests of 1–3 items, then of one, until every shard was
// refused 402; each answer must be 200 or 402, within the funding wait.
func (w *World) spendAll(a *account, price core.CostUnits) {
	type conn struct {
		n     *node
		t     *transport
		spent bool // refused 402 for one item
		// since is when its first 503 in a row came (0: none): on a
		// fleet, funding held by other nodes comes back within
		// w.fleetBound() (docs/FLEET.md); on one node, a 503 is a failure.
		since int64
	}
	var conns []*conn
	for _, n := range w.live() {
		for _, t := range n.transports {
			conns = append(conns, &conn{n: n, t: t})
		}
	}
	for round := 0; ; round++ {
		if round > 100_000 {
			w.fail("%s: never refused 402 everywhere", a.id)
		}
		// unanswered counts this round's probes only: other clients'
		// requests from before the check may rightly wait longer (a
		// post-paid report waits for retired leases' reservations).
		open, unanswered := 0, 0
		for _, c := range conns {
			if c.spent {
				continue
			}
			open++
			items := 1
			if round < 50 {
				items = 1 + w.rng.IntN(3)
			}
			w.stats.Probes++
			r := c.t.serve("POST", "/v1/check", a.key, `{"workload":[{"op":"requests","count":`+strconv.Itoa(items)+`}]}`, w.now)
			units := core.CostUnits(items) * price
			unanswered++
			w.await(c.n, r, func(st int, m map[string]any) {
				unanswered--
				if st != 503 {
					c.since = 0
				}
				switch {
				case st == 200:
					a.acked += units
				case st == 402 && items == 1:
					c.spent = true
				case st == 402:
				case st == 503 && len(w.nodes) > 1 && (c.since == 0 || r.at-c.since <= w.fleetBound()):
					if c.since == 0 {
						c.since = r.sent
					}
				default:
					w.livenessFailed(a, c.n, st, m, r, units)
				}
				if took := r.at - r.sent; took > w.cfg.FundingWait+5e6 {
					w.fail("%s on %s: a %d-unit check took %d ms (funding wait %d ms)", a.id, c.n, units, took/1e6, w.cfg.FundingWait/1e6)
				}
			}, func() { w.fail("%s: a probe was lost", a.id) })
		}
		if open == 0 {
			break
		}
		for deadline := w.now + w.cfg.FundingWait + 10e6; unanswered > 0 && w.now < deadline; {
			w.advance(1e6)
			for _, n := range w.nodes {
				n.sp.flush()
			}
		}
		if unanswered > 0 {
			w.fail("%s: %d probes unanswered past the funding wait", a.id, unanswered)
		}
	}
	// What is left once every shard refused one item: less than one item.
	w.advance(500e6) // exports settle what was spent
	ev, err := w.store.Evidence(context.Background(), a.id)
	if err != nil {
		w.fail("%s: %v", a.id, err)
	}
	if ev.Remaining >= price {
		w.fail("%s: refused 402 everywhere with %d units left, enough for a %d-unit check (deposited %d, admitted %d)",
			a.id, ev.Remaining, price, a.deposited, a.acked)
	}
}

// livenessFailed reports a probe answered neither 200 nor 402, with the
// funding state of every node.
func (w *World) livenessFailed(a *account, on *node, st int, m map[string]any, r *request, units core.CostUnits) {
	for _, n := range w.live() {
		w.log("%s: %s", n, n.sh.Machine().Debug(string(a.id)))
		for i, s := range n.shards {
			if sl, err := s.Engine().Lease(a.id); err == nil {
				w.log("  shard %d: token %d %+v", i, sl.Token(), sl.Balance())
			}
		}
	}
	if ev, err := w.store.Evidence(context.Background(), a.id); err == nil {
		w.log("ledger evidence of %s: %+v", a.id, ev)
	}
	w.fail("liveness: %s on %s: a %d-unit check answered %d %v after %d ms: money that exists must be spendable, or refused 402",
		a.id, on, units, st, m, (r.at-r.sent)/1e6)
}

// drain stops traffic and lets the nodes settle: reservations lapse, usage
// is exported, idle leases are handed back.
func (w *World) drain() {
	for range 200 {
		w.advance(int64(float64(w.cfg.LeaseTTL) * 0.05))
		for _, n := range w.nodes {
			n.sp.flush()
		}
	}
	for _, p := range w.clients {
		if p.lost != nil {
			p.lost()
		}
	}
	w.clients = nil
	for _, a := range w.accounts {
		for _, r := range a.live {
			if r.committed {
				a.maybe += r.quote // lapsed: billed at its quote
			}
		}
		a.live = nil
	}
	for _, n := range w.live() {
		if err := n.exporter.Export(context.Background()); err != nil {
			w.fail("final export: %v", err)
		}
	}
}

// checkEnd checks the drained world.
func (w *World) checkEnd() {
	ctx := context.Background()
	if active, err := w.store.Leases(ctx, true); err != nil || len(active) != 0 {
		for _, l := range active {
			for _, n := range w.live() {
				w.log("%s: %s: %s", l.Account, n, n.sh.Machine().Debug(string(l.Account)))
			}
		}
		w.fail("after draining, active leases: %+v, %v", active, err)
	}
	for _, n := range w.live() {
		if next := n.sh.Next(); next != 0 {
			w.fail("after draining, %s still wants a tick at %d (now %d)", n, next, w.now)
		}
		if !n.sh.Machine().Quiet() {
			w.fail("after draining, %s is not quiet", n)
		}
	}
	// Every root's settled usage is what its accounts' clients were told,
	// give or take what crashes and damaged disks left uncertain: nothing
	// billed twice, nothing acknowledged left unbilled but what a damaged
	// disk or a lost volume took before export (gone by design).
	lo, lost, hi := map[core.AccountID]core.CostUnits{}, map[core.AccountID]core.CostUnits{}, map[core.AccountID]core.CostUnits{}
	roots := []core.AccountID{}
	for _, a := range w.accounts {
		if a.root == a.id {
			roots = append(roots, a.id)
		}
		lo[a.root] += a.acked
		lost[a.root] += a.lost
		hi[a.root] += a.acked + a.maybe
	}
	for _, root := range roots {
		acct, err := w.store.Account(ctx, root)
		if err != nil {
			w.fail("%s: %v", root, err)
		}
		owed := lo[root] - min(lost[root], lo[root])
		if acct.Settled < owed || acct.Settled > hi[root] {
			w.fail("%s settled %d, clients were told %d, %d of it at least (the rest may be usage damaged disks lost before export; up to %d with what crashes left uncertain)",
				root, acct.Settled, lo[root], owed, hi[root])
		}
		// A node that comes back forfeits nothing: injected ledger errors
		// and outages do not excuse a loss. Only a node that came back on
		// an empty data directory leaves its earlier incarnation's leases
		// to be forfeited, by design, and one whose spool came back cut
		// leaves what its cut records may have spent (noteCutLoss).
		if acct.Loss > w.cutLossOf(root) && !w.lostVolume {
			if all, err := w.store.Leases(ctx, false); err == nil {
				for _, l := range all {
					if l.Account == root && l.Used+l.Credited != l.Granted {
						w.log("lease %+v", l)
					}
				}
			}
			w.fail("%s lost %d (%d of it left by cut spools): a node that comes back forfeits nothing", root, acct.Loss, w.cutLossOf(root))
		}
		// Nothing acknowledged is credited back: what the root can still
		// spend never exceeds what was deposited less what its clients
		// were told was billed (roots without budgets, whose deposits
		// the simulator knows).
		if b := w.byID[root]; b.deposited > 0 && acct.Budget.Period == ledger.PeriodNone {
			if spendable, err := ledger.Spendable(&acct); err == nil && spendable+lo[root] > b.deposited+acct.Overage {
				w.fail("%s can spend %d after %d were acknowledged of %d deposited: acknowledged usage was credited back",
					root, spendable, lo[root], b.deposited)
			}
		}
	}
	w.checkTraffic()
}

// cutLossOf is the loss cut spools left on root's leases, by design.
func (w *World) cutLossOf(root core.AccountID) core.CostUnits {
	var sum core.CostUnits
	for _, l := range w.lostToCut {
		if l.root == root {
			sum += l.units
		}
	}
	return sum
}

// checkTraffic bounds ledger calls: an account idle for long causes none
// once its lease is handed back, and a busy one renews, not churns.
func (w *World) checkTraffic() {
	w.stats.LedgerCalls = len(w.ledgerCalls)
	const perMinute = 60 // per node
	window := int64(60e9)
	for _, a := range w.accounts {
		var times []int64
		for _, c := range w.ledgerCalls {
			if c.account == a.id {
				times = append(times, c.at)
			}
		}
		for i, j := 0, 0; j < len(times); j++ {
			for times[j]-times[i] > window {
				i++
			}
			if j-i+1 > perMinute*len(w.nodes) {
				kinds := map[string]int{}
				for _, c := range w.ledgerCalls {
					if c.account == a.id && c.at >= times[i] && c.at <= times[j] {
						kinds[c.kind.String()]++
					}
				}
				w.log("calls: %v", kinds)
				w.fail("%s: %d ledger calls within a simulated minute ending at %d", a.id, j-i+1, times[j])
			}
		}
	}
	w.checkCadences()
	// The drained end: after three lease lifetimes of quiet, not one call.
	quiet := w.now - 2*w.cfg.LeaseTTL
	for _, c := range w.ledgerCalls {
		if c.at > quiet {
			w.fail("a ledger call (%s for %s) at %d, long after the last traffic", c.kind, c.account, c.at)
		}
	}
}

// The cadences of a node's ledger transactions.
const (
	exportPass      = iota // control.SettleEvery
	fundingRead            // fleet.DefaultFundsEvery
	maintenancePass        // a second
	numCadences
)

// checkCadences bounds each node's ledger transactions of each cadence —
// export passes, funding reads, maintenance passes — over every window of
// ten simulated seconds by what the cadence allows, however busy the node
// and however many nodes announce funding moves. Settling every 100 ms
// broke it.
func (w *World) checkCadences() {
	const window = int64(10e9)
	every := [numCadences]int64{int64(control.SettleEvery), int64(fleet.DefaultFundsEvery), 1e9}
	for _, n := range w.nodes {
		for c, times := range n.ledgerTx {
			limit := int(window/every[c]) + 1
			for i, j := 0, 0; j < len(times); j++ {
				for times[j]-times[i] >= window {
					i++
				}
				if j-i+1 > limit {
					w.fail("%s: %d ledger transactions of cadence %d within ten simulated seconds ending at %d, at most %d",
						n, j-i+1, c, times[j], limit)
					return
				}
			}
		}
	}
}
