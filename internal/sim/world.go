// Package sim is a deterministic simulator of tollgated nodes on one
// ledger. Each node is the daemon's own pieces — the control-plane shell
// (control.Shell) around the plane's state machine, real shards over real
// rings, the same-node recovery, the exporter and the provisioner — with
// the simulator standing in for goroutines, sockets and timers: a virtual
// clock, and events for the ledger's answers and the fleet's
// announcements. The ledger is the real embedded one (bbolt, in a
// temporary directory), shared by the nodes; each node's spool is a double
// that keeps the real spool's contract (spool_contract_test.go).
//
// A run drives random traffic — bursts, long idle periods, staged requests
// left to lapse, post-paid reports that run balances into debt,
// exhaustion — random administration — deposits, suspensions and
// reactivations, policy changes, key rotations, budget rollovers — and
// injected faults: small rings that fill, ledger calls that fail or are
// slow, ledger outages longer than a lease, a spool that lags or whose
// disk fills, clock jumps, crashes of a node at any step, a crashed node's
// spool losing its tail or its whole volume.
//
// Safety is checked after every step: the ledger's conservation, every
// shard's lease slots, and every invariant (they panic under test). At the
// end the faults stop and progress is checked (liveness): on fresh
// accounts of odd prices spent from every node and shard at once, every
// request is answered 200 or 402 within the funding wait — never 503 —
// until less than one request's price is left. Then the world drains and
// what clients were told was billed is billed, a node that came back
// forfeits nothing, no lease is held, the nodes sleep, and ledger traffic
// stayed bounded.
//
// A run is a function of its seed: the same seed replays the same run
// (Go's randomised map order never reaches a decision).
package sim

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

var secret = bytes.Repeat([]byte{7}, 32)

// platformToken is the token the simulated agent runtime reports post-paid
// usage with.
const platformToken = "sim-platform-token"

// Config is one run.
type Config struct {
	Seed       uint64
	Dir        string // for the ledger file
	Nodes      int    // on one ledger
	Shards     int    // per node
	Steps      int
	RingSize   int   // a small power of two: rings fill
	LeaseTTL   int64 // ns
	LeaseGrace int64
	// FundingWait is the shards' funding wait (ns).
	FundingWait int64
	Faults      Faults
}

// Faults are per-step (or per-call) probabilities.
type Faults struct {
	LedgerError  float64 // a ledger call fails without running
	LedgerSlow   float64 // a ledger call takes up to 2 s
	LedgerOutage float64 // the ledger is out of reach for 12–60 s
	SpoolLag     float64 // the spools do not flush this step
	DiskFull     float64 // a node's spool disk is full for up to 3 s
	Crash        float64 // a node dies (kill -9) and restarts
	LostTail     float64 // a crashed node's spool loses its last records
	LostVolume   float64 // a crashed node restarts on an empty data directory
	LostFile     float64 // a crashed node's node-id file is lost
	IdleJump     float64 // the clock jumps 5–90 s: nothing happens meanwhile
	DayJump      float64 // the clock jumps a day: budgets roll over
}

// DefaultConfig is the configuration `make test` runs seeds of.
func DefaultConfig(seed uint64, dir string) Config {
	return Config{Seed: seed, Dir: dir, Nodes: 1, Shards: 3, Steps: 4000, RingSize: 64, LeaseTTL: 10e9, LeaseGrace: 10e9,
		FundingWait: 50e6,
		Faults: Faults{LedgerError: 0.02, LedgerSlow: 0.02, LedgerOutage: 0.0003, SpoolLag: 0.3, DiskFull: 0.001,
			Crash: 0.002, LostTail: 0.2, LostVolume: 0.05, LostFile: 0.1, IdleJump: 0.004, DayJump: 0.0005}}
}

// World is the simulator's state.
type World struct {
	cfg   Config
	rng   *rand.Rand
	now   int64
	store *boltstore.Store
	nodes []*node
	fail  func(format string, args ...any)
	log   func(format string, args ...any)

	events      eventQueue
	eventSeq    uint64
	outageUntil int64 // the ledger is out of reach until then

	accounts    []*account
	byID        map[core.AccountID]*account
	clients     []*pending // client requests not answered yet
	ledgerCalls []ledgerCall
	stats       Stats
	// lostVolume: some node restarted on an empty data directory: its
	// earlier incarnation's leases stay forfeited, by design.
	lostVolume bool
	// lostToCut is, per lease, the loss a node's cut spool leaves, by
	// design (cutLoss): at most this much of the lease's remainder stays
	// loss.
	lostToCut map[uint64]cutLoss
}

// cutLoss is loss a cut spool leaves on one lease, and the root it falls on.
type cutLoss struct {
	root  core.AccountID
	units core.CostUnits
}

type ledgerCall struct {
	at      int64
	account core.AccountID
	kind    funding.CallKind
}

// Stats counts a run.
type Stats struct {
	Steps, Crashes, Requests, Admitted, Refused, LedgerCalls int
	Reports, ReportsBilled, Rotations                        int
	Outages, DisksFull, LostTails, LostVolumes, LostFiles    int
	Probes                                                   int
}

// New builds a world: a ledger with a small hierarchy and its nodes. fail
// reports a broken check (and must stop the run); log narrates.
func New(cfg Config, fail, log func(string, ...any)) *World {
	w := &World{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		now: 1_773_144_000e9, fail: fail, log: log, byID: make(map[core.AccountID]*account),
		lostToCut: make(map[uint64]cutLoss)}
	store, err := boltstore.Open(filepath.Join(cfg.Dir, "ledger.db"), boltstore.Options{NoSync: true})
	if err != nil {
		fail("ledger: %v", err)
	}
	w.store = store
	w.provisionLedger()
	for i := range max(cfg.Nodes, 1) {
		w.nodes = append(w.nodes, w.start(fmt.Sprintf("n%d", i), newMemSpool()))
	}
	return w
}

// Close releases the world's files.
func (w *World) Close() {
	for _, n := range w.nodes {
		n.close()
	}
	w.store.Close()
}

// event is something that happens at a time: a ledger call's answer, an
// announcement's arrival. One of a node's dies with it unless it already
// reached the ledger.
type event struct {
	due, seq int64
	node     *node
	fn       func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].due != q[j].due {
		return q[i].due < q[j].due
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// later runs fn after d, on behalf of n.
func (w *World) later(d int64, n *node, fn func()) {
	w.eventSeq++
	heap.Push(&w.events, &event{due: w.now + d, seq: int64(w.eventSeq), node: n, fn: fn})
}

// ledgerLatency draws how long a ledger call takes.
func (w *World) ledgerLatency() int64 {
	if w.rng.Float64() < w.cfg.Faults.LedgerSlow {
		return w.rng.Int64N(2e9)
	}
	return 100e3 + w.rng.Int64N(3e6)
}

func (w *World) ledgerDown() bool { return w.now < w.outageUntil }

// fundsMoved tells the other nodes that the funding of ids (nil: anyone's)
// moved, as the ledger's funds announcements do: each notes them on its
// cadence (fleet.RefreshCadence, as the daemon's fleet.Funds) and reads
// their evidence again when it lets it.
func (w *World) fundsMoved(from *node, ids []core.AccountID) {
	for _, n := range w.nodes {
		if n == from || n.dead {
			continue
		}
		w.later(200e3+w.rng.Int64N(2e6), n, func() {
			if n.dead || w.ledgerDown() {
				return // lost, as a notification to a listener not connected
			}
			n.funds.Note(ids, ids == nil)
			w.scheduleRefresh(n)
		})
	}
}

// scheduleRefresh schedules n's next read of funding evidence when its
// cadence lets it start, unless one is scheduled already.
func (w *World) scheduleRefresh(n *node) {
	due, pending := n.funds.Due()
	if n.refreshing || !pending {
		return
	}
	n.refreshing = true
	w.later(max(due-w.now, 0), n, func() {
		n.refreshing = false
		if n.dead {
			return
		}
		ids, all, ok := n.funds.Take(w.now)
		if !ok {
			w.scheduleRefresh(n)
			return
		}
		if w.ledgerDown() {
			n.funds.Note(ids, all) // read when the ledger answers again
			n.funds.Defer(w.outageUntil)
			w.scheduleRefresh(n)
			return
		}
		n.ledgerTx[fundingRead] = append(n.ledgerTx[fundingRead], w.now)
		var err error
		if all {
			err = n.prov.RefreshAllFunding(context.Background())
		} else {
			err = n.prov.RefreshFunding(context.Background(), ids)
		}
		if err != nil {
			w.fail("%s: funding refresh: %v", n, err)
		}
		n.funds.Done(w.now, w.now)
		w.scheduleRefresh(n)
	})
}

// announce carries a node's announcement to the other nodes, through the
// ledger (as PostgreSQL's notifications do): lost while it is down.
func (w *World) announce(from *node, a plane.Announcement) {
	if w.ledgerDown() {
		return
	}
	for _, n := range w.nodes {
		if n == from || n.dead {
			continue
		}
		w.later(200e3+w.rng.Int64N(2e6), n, func() {
			if !n.dead {
				n.sh.Heard(a, w.now)
			}
		})
	}
}

// changed publishes an admin change of acct on every node: on one at once
// (the node the admin API ran on), on the others as their change-log
// followers read it.
func (w *World) changed(acct ledger.Account) {
	first := true
	for _, n := range w.nodes {
		if n.dead {
			continue
		}
		if first {
			if err := n.prov.AccountChanged(acct); err != nil {
				w.fail("publish %s: %v", acct.ID, err)
			}
			first = false
			continue
		}
		w.later(1e6+w.rng.Int64N(20e6), n, func() {
			if n.dead {
				return
			}
			fresh, err := w.store.Account(context.Background(), acct.ID)
			if err != nil {
				w.fail("re-read %s: %v", acct.ID, err)
			}
			if err := n.prov.AccountChanged(fresh); err != nil {
				w.fail("publish %s on %s: %v", acct.ID, n, err)
			}
		})
	}
}

// provisionLedger creates the accounts: an org funding a workspace of
// agents (one of them metered, with a budget), and a small root of its own
// that runs out.
func (w *World) provisionLedger() {
	ctx := context.Background()
	type spec struct {
		id, parent core.AccountID
		unmetered  bool
		deposit    core.CostUnits
		budget     ledger.Budget
		weight     core.CostUnits
		hot        bool
		limits     string
	}
	for _, s := range []spec{
		{id: "org", deposit: 3_000_000, weight: 1},
		{id: "ws", parent: "org", unmetered: true, weight: 1},
		{id: "a0", parent: "ws", unmetered: true, weight: 3, hot: true},
		{id: "a1", parent: "ws", unmetered: true, weight: 5},
		{id: "a2", parent: "ws", budget: ledger.Budget{Allowance: 40_000, Period: ledger.PeriodDay}, weight: 7,
			limits: `,"request_rate":200,"request_burst":50`},
		{id: "solo", deposit: 25_000, weight: 10, hot: true, limits: `,"max_concurrent":8`},
	} {
		if _, _, err := w.store.CreateAccount(ctx, ledger.AccountSpec{ID: s.id, Parent: s.parent, Unmetered: s.unmetered}, w.now); err != nil {
			w.fail("create %s: %v", s.id, err)
		}
		if s.deposit > 0 {
			if _, _, err := w.store.Deposit(ctx, s.id, s.deposit, "seed", w.now); err != nil {
				w.fail("deposit %s: %v", s.id, err)
			}
		}
		if s.budget.Period != ledger.PeriodNone {
			if _, err := w.store.SetBudget(ctx, s.id, s.budget, w.now); err != nil {
				w.fail("budget %s: %v", s.id, err)
			}
		}
		w.setPolicy(s.id, s.weight, 100, s.limits)
		a := w.addAccount(s.id, s.parent, s.weight, s.hot)
		a.deposited = s.deposit
	}
	if err := w.store.AddPlatformToken(ctx, ledger.PlatformToken{ID: "p", Digest: digest(platformToken), CreatedAt: w.now}); err != nil {
		w.fail("platform token: %v", err)
	}
}

// setPolicy stores id's policy: requests priced at weight each, at most
// maxItems a request.
func (w *World) setPolicy(id core.AccountID, weight core.CostUnits, maxItems int, limits string) {
	policy := fmt.Sprintf(`{"permissions":["chat"],"operations":{"requests":{"weight":%d}},"limits":{"max_items":%d,"hold_timeout_ms":2000%s}}`,
		weight, maxItems, limits)
	if _, err := w.store.SetPolicy(context.Background(), id, []byte(policy)); err != nil {
		w.fail("policy %s: %v", id, err)
	}
}

// addAccount gives a ledger account a key and the simulator's record.
func (w *World) addAccount(id, parent core.AccountID, weight core.CostUnits, hot bool) *account {
	key := "key-" + string(id)
	if err := w.store.AddKey(context.Background(), ledger.Key{ID: "k-" + string(id), Account: id, Digest: digest(key), CreatedAt: w.now}); err != nil {
		w.fail("key %s: %v", id, err)
	}
	root := id
	if p := w.byID[parent]; p != nil {
		root = p.root
	}
	a := &account{id: id, parent: parent, root: root, key: key, keyID: "k-" + string(id), weight: weight, hot: hot}
	w.accounts = append(w.accounts, a)
	w.byID[a.id] = a
	return a
}

// digest is a key's digest under the simulator's secret.
func digest(key string) credential.Digest {
	h, _ := credential.NewHasher(secret)
	d, _ := h.Digest([]byte(key))
	return d
}

// Run runs the configured steps, then checks progress, drains and checks
// the end state.
func (w *World) Run() Stats {
	for w.stats.Steps = 0; w.stats.Steps < w.cfg.Steps; w.stats.Steps++ {
		w.step()
		w.check()
	}
	w.quiesce()
	w.checkLiveness()
	w.drain()
	w.checkEnd()
	return w.stats
}

// spoolLatency is how long a spool takes at most to make a record
// durable while its disk keeps up (a step's SpoolLag fault aside).
const spoolLatency = 2e6

// live is the nodes that run.
func (w *World) live() []*node {
	var out []*node
	for _, n := range w.nodes {
		if !n.dead {
			out = append(out, n)
		}
	}
	return out
}

// advance moves the clock by d, running every event, deadline, export
// and maintenance due on the way, in time order.
func (w *World) advance(d int64) { w.advanceTo(w.now + d) }

func (w *World) advanceTo(t int64) {
	var eager *node // the last node whose deadline moved the clock
	for range 1_000_000 {
		next := t
		if len(w.events) > 0 {
			next = min(next, w.events[0].due)
		}
		for _, n := range w.live() {
			if d := n.next(); d != 0 && max(d, w.now+1) < next {
				next, eager = max(d, w.now+1), n
			}
		}
		if w.waiting() {
			// Requests wait for funding: a waiter's deadline is looked at
			// within a shard loop's tick.
			next = min(next, w.now+1e6)
		}
		w.now = max(w.now, next)
		for len(w.events) > 0 && w.events[0].due <= w.now {
			heap.Pop(&w.events).(*event).fn()
		}
		for _, n := range w.live() {
			if w.now-n.sp.flushedAt >= spoolLatency {
				n.sp.flush()
				n.sp.flushedAt = w.now
			}
			n.background()
			n.pump()
		}
		w.collect()
		if w.now >= t {
			return
		}
	}
	if eager == nil {
		w.fail("the clock did not reach %d from %d: the events never end", t, w.now)
	}
	w.fail("the clock did not reach %d from %d: %s wants it all the time (export at %d, backlog %d)", t, w.now, eager, eager.nextExport, eager.sh.Backlog())
}

// waiting reports whether a client request may be waiting for funding: one
// sent less than a funding wait (and a tick) ago is unanswered.
func (w *World) waiting() bool {
	for _, p := range w.clients {
		if w.now-p.r.sent <= w.cfg.FundingWait+2e6 {
			return true
		}
	}
	return false
}

// step advances the clock and does one random thing.
func (w *World) step() {
	f := w.cfg.Faults
	switch p := w.rng.Float64(); {
	case p < f.Crash:
		w.crash(w.nodes[w.rng.IntN(len(w.nodes))])
	case p < f.Crash+f.IdleJump:
		w.advance(5e9 + w.rng.Int64N(85e9))
	case p < f.Crash+f.IdleJump+f.DayJump:
		w.advance(24 * 3600e9)
	case p < f.Crash+f.IdleJump+f.DayJump+f.LedgerOutage:
		w.stats.Outages++
		w.outageUntil = w.now + 12e9 + w.rng.Int64N(48e9)
		w.log("step %d: the ledger is out of reach until %d", w.stats.Steps, w.outageUntil)
	case p < f.Crash+f.IdleJump+f.DayJump+f.LedgerOutage+f.DiskFull:
		w.fillDisk(w.nodes[w.rng.IntN(len(w.nodes))])
	case p < f.Crash+f.IdleJump+f.DayJump+f.LedgerOutage+f.DiskFull+0.01:
		if !w.ledgerDown() {
			w.administer()
		}
	default:
		w.advance(w.rng.Int64N(3e6))
		for range 1 + w.rng.IntN(4) {
			w.client()
		}
	}
	if w.rng.Float64() >= f.SpoolLag {
		for _, n := range w.nodes {
			n.sp.flush()
		}
	}
	w.advance(0)
}

// fillDisk fills n's spool disk for up to 3 s: appends are refused, the
// shards refuse what would bill (503 storage-full), and it all resumes by
// itself once the disk has room.
func (w *World) fillDisk(n *node) {
	if n.dead || n.sp.full {
		return
	}
	w.stats.DisksFull++
	n.sp.full = true
	n.storage.Set(shardStorageFull)
	w.later(w.rng.Int64N(3e9), n, func() {
		n.sp.full = false
		n.storage.Set(shardStorageOK)
	})
}

// crash kills n without warning and starts it again on its data
// directory, after a while in which the other nodes go on: what was not
// durable is gone, clients waiting for its answers get none, and calls in
// flight may or may not have reached the ledger. The disk may have lost
// the spool's last records, or the whole volume.
func (w *World) crash(n *node) {
	if n.dead {
		return
	}
	w.stats.Crashes++
	w.log("step %d: %s crashes at %d", w.stats.Steps, n, w.now)
	n.dead = true
	kept := w.events[:0]
	var settled int64 // when the calls in flight that reached the ledger are done
	for _, e := range w.events {
		if e.node == n && w.rng.IntN(2) == 0 {
			continue // never reached the ledger
		}
		if e.node == n {
			settled = max(settled, e.due)
		}
		kept = append(kept, e)
	}
	w.events = kept
	heap.Init(&w.events)
	w.loseClients(n)
	n.close()
	sp := n.sp
	sp.crash()
	var lost map[uint64]core.CostUnits
	switch p := w.rng.Float64(); {
	case p < w.cfg.Faults.LostVolume:
		w.stats.LostVolumes++
		w.lostVolume = true
		w.unbilledLost(sp, n.holder, 0)
		sp = newMemSpool()
		w.log("  its volume is lost: it comes back empty")
	case p < w.cfg.Faults.LostVolume+w.cfg.Faults.LostTail:
		w.stats.LostTails++
		k := 1 + w.rng.IntN(10)
		lost = w.unbilledLost(sp, n.holder, k)
		sp.loseTail(k)
		w.log("  its spool loses its last %d records", k)
	case p < w.cfg.Faults.LostVolume+w.cfg.Faults.LostTail+w.cfg.Faults.LostFile:
		w.stats.LostFiles++
		w.log("  its node-id file is lost")
		if inc, err := control.MatchSpool(w.cfg.Dir, "spool", "node-id", "", sp.identity()); !errors.Is(err, control.ErrIdentity) {
			w.fail("%s: a start without its node-id file was not refused (incarnation %d, %v): it would bill its spool a second time", n, inc, err)
		}
		w.log("  the start is refused; the operator starts it with --node-id %s", n.id)
	}
	// A killed process's transactions end (commit or abort) when its
	// connections close, before it can be started again: the calls in
	// flight are done by the restart.
	w.advance(max(w.rng.Int64N(20e9), settled-w.now+1))
	if sp.cut > 0 {
		w.noteCutLoss(n.holder, lost)
	}
	w.replace(n, w.start(n.id, sp))
}

// noteCutLoss notes, as holder comes back, the loss its cut spool will
// leave for good once recovery has billed what survived (lost: the
// unbilled units its cut records spent, per lease):
//   - a lease of its forfeited before it is back (while it was away, or
//     in an outage before it crashed) stays forfeited, for good: the cut
//     records may have spent it (docs/RUNBOOK.md, the spool cut at start;
//     docs/FLEET.md, loss keeps what no surviving spool accounts for);
//   - a lease it still holds is released with nothing returned: the cut
//     records may have been acknowledged and have spent it;
//   - a lease it released with usage not yet billed (the gap is
//     provisional loss that its late usage turns into settled) keeps as
//     loss what the cut records would have billed.
func (w *World) noteCutLoss(holder string, lost map[uint64]core.CostUnits) {
	all, err := w.store.Leases(context.Background(), false)
	if err != nil {
		w.fail("leases: %v", err)
	}
	for _, l := range all {
		if l.Holder != holder {
			continue
		}
		gap := l.Granted - l.Used - l.Credited
		if l.State == ledger.LeaseReleased {
			gap = min(gap, lost[l.ID])
		} // forfeited or active: recovery from a cut spool returns none of it

		if gap > w.lostToCut[l.ID].units {
			w.lostToCut[l.ID] = cutLoss{root: w.byID[l.Account].root, units: gap}
		}
	}
}

// replace puts the new incarnation of a node in its place.
func (w *World) replace(old, n *node) {
	for i, x := range w.nodes {
		if x == old {
			w.nodes[i] = n
		}
	}
}

// String summarises a run.
func (s Stats) String() string {
	return strings.TrimSpace(fmt.Sprintf("%d steps, %d crashes (%d lost tails, %d lost volumes, %d lost node-id files), %d ledger outages, %d full disks, %d requests (%d answered 200, %d refused; %d post-paid reports, %d billed at once), %d key rotations, %d ledger calls, %d liveness probes",
		s.Steps, s.Crashes, s.LostTails, s.LostVolumes, s.LostFiles, s.Outages, s.DisksFull, s.Requests, s.Admitted, s.Refused, s.Reports, s.ReportsBilled, s.Rotations, s.LedgerCalls, s.Probes))
}
