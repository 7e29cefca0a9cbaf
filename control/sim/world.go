// Package sim is a deterministic simulator of a tollgated node. It drives
// the control plane's real state machine (control/plane), real shards over
// real rings, the real same-node recovery, exporter and provisioner, and a
// real ledger (bbolt in a temporary directory), on a virtual clock, with
// random traffic — bursts, long idle periods, staged requests left to
// lapse, post-paid reports that run balances into debt, exhaustion —
// random administration — deposits, suspensions and reactivations of
// scopes, policy changes, key rotations, budget rollovers — and injected
// faults — small rings that fill, ledger calls that fail or are slow, a
// spool that lags, clock jumps, and crashes of the node at any step.
//
// After every step it checks the ledger's conservation, every shard's lease
// slots and that no invariant broke (they panic under test); at the end it
// drains the node and checks that what clients were told was billed is
// billed, nothing was forfeited, the node holds no lease and sleeps, and
// ledger traffic stayed bounded: an idle account's lease is handed back
// once and then causes no ledger call at all.
//
// A run is a function of its seed: the same seed replays the same run
// (Go's randomised map order never reaches a decision).
package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tollgated/tollgated/control/funding"
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
	Shards     int
	Steps      int
	RingSize   int   // a small power of two: rings fill
	LeaseTTL   int64 // ns
	LeaseGrace int64
	// FundingWait is the shards' funding wait (ns; negative: none).
	FundingWait int64
	Faults      Faults
}

// Faults are per-step (or per-call) probabilities.
type Faults struct {
	LedgerError float64 // a ledger call fails without running
	LedgerSlow  float64 // a ledger call takes up to 2 s
	SpoolLag    float64 // the spool does not flush this step
	Crash       float64 // the node dies (kill -9) and restarts
	IdleJump    float64 // the clock jumps 5–90 s: nothing happens meanwhile
	DayJump     float64 // the clock jumps a day: budgets roll over
}

// DefaultConfig is the configuration `make test` runs seeds of.
func DefaultConfig(seed uint64, dir string) Config {
	return Config{Seed: seed, Dir: dir, Shards: 3, Steps: 4000, RingSize: 64, LeaseTTL: 10e9, LeaseGrace: 10e9,
		FundingWait: 50e6,
		Faults:      Faults{LedgerError: 0.02, LedgerSlow: 0.02, SpoolLag: 0.3, Crash: 0.002, IdleJump: 0.004, DayJump: 0.0005}}
}

// World is the simulator's state.
type World struct {
	cfg   Config
	rng   *rand.Rand
	now   int64
	store *boltstore.Store
	spool *memSpool
	node  *node
	fail  func(format string, args ...any)
	log   func(format string, args ...any)

	accounts    []*account
	byID        map[core.AccountID]*account
	clients     []*pending // client requests not answered yet
	callSeq     uint64
	ledgerCalls []ledgerCall
	stats       Stats
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
	spooled                                                  int
}

// account is a simulated account and what its clients were told.
type account struct {
	id     core.AccountID
	parent core.AccountID
	root   core.AccountID
	key    string
	keyID  string
	weight core.CostUnits // units per "requests" item
	hot    bool
	// acked: units clients were told were billed (a check's or finish's
	// 200). maybe: units that may or may not be billed (answers lost in
	// a crash, commits whose finish was not acknowledged).
	acked, maybe core.CostUnits
	live         []*reservation
}

type reservation struct {
	id        string
	quote     core.CostUnits
	committed bool // the commit was acknowledged
	finishing bool // a finish was sent and not answered
}

// pending is a client request waiting for its answer.
type pending struct {
	r    *request
	done func(status int, body map[string]any)
	lost func() // the node died before answering
}

// New builds a world: a ledger with a small hierarchy and a node serving
// it. fail reports a broken check (and must stop the run); log narrates.
func New(cfg Config, fail, log func(string, ...any)) *World {
	w := &World{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		now: 1_773_144_000e9, spool: &memSpool{}, fail: fail, log: log, byID: make(map[core.AccountID]*account)}
	store, err := boltstore.Open(filepath.Join(cfg.Dir, "ledger.db"), boltstore.Options{NoSync: true})
	if err != nil {
		fail("ledger: %v", err)
	}
	w.store = store
	w.provisionLedger()
	w.node = w.startNode()
	w.node.boot()
	return w
}

// Close releases the world's files.
func (w *World) Close() {
	w.node.close()
	w.store.Close()
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
		policy := fmt.Sprintf(`{"permissions":["chat"],"operations":{"requests":{"weight":%d}},"limits":{"max_items":100,"hold_timeout_ms":2000%s}}`, s.weight, s.limits)
		if _, err := w.store.SetPolicy(ctx, s.id, []byte(policy)); err != nil {
			w.fail("policy %s: %v", s.id, err)
		}
		key := "key-" + string(s.id)
		h, _ := credential.NewHasher(secret)
		d, _ := h.Digest([]byte(key))
		if err := w.store.AddKey(ctx, ledger.Key{ID: "k-" + string(s.id), Account: s.id, Digest: d, CreatedAt: w.now}); err != nil {
			w.fail("key %s: %v", s.id, err)
		}
		root := s.id
		if p := w.byID[s.parent]; p != nil {
			root = p.root
		}
		a := &account{id: s.id, parent: s.parent, root: root, key: key, keyID: "k-" + string(s.id), weight: s.weight, hot: s.hot}
		w.accounts = append(w.accounts, a)
		w.byID[a.id] = a
	}
	if err := w.store.AddPlatformToken(ctx, ledger.PlatformToken{ID: "p", Digest: digest(platformToken), CreatedAt: w.now}); err != nil {
		w.fail("platform token: %v", err)
	}
}

// digest is a key's digest under the simulator's secret.
func digest(key string) credential.Digest {
	h, _ := credential.NewHasher(secret)
	d, _ := h.Digest([]byte(key))
	return d
}

// ledgerLatency draws how long a ledger call takes.
func (w *World) ledgerLatency() int64 {
	if w.rng.Float64() < w.cfg.Faults.LedgerSlow {
		return w.rng.Int64N(2e9)
	}
	return 100e3 + w.rng.Int64N(3e6)
}

// Run runs the configured steps, then drains and checks the end state.
func (w *World) Run() Stats {
	for w.stats.Steps = 0; w.stats.Steps < w.cfg.Steps; w.stats.Steps++ {
		w.step()
		w.check()
	}
	w.drain()
	w.checkEnd()
	return w.stats
}

// step advances the clock and does one random thing.
func (w *World) step() {
	f := w.cfg.Faults
	switch p := w.rng.Float64(); {
	case p < f.Crash:
		w.crash()
	case p < f.Crash+f.IdleJump:
		w.advance(5e9 + w.rng.Int64N(85e9))
	case p < f.Crash+f.IdleJump+f.DayJump:
		w.advance(24 * 3600e9)
	case p < f.Crash+f.IdleJump+f.DayJump+0.01:
		w.administer()
	default:
		w.advance(w.rng.Int64N(3e6))
		for range 1 + w.rng.IntN(4) {
			w.client()
		}
	}
	if w.rng.Float64() >= f.SpoolLag {
		w.spool.flush()
	}
	w.node.pump()
	w.node.background()
	w.node.pump()
	w.collect()
}

// advance moves the clock in steps the node can keep up with: while idle,
// the node runs its timers, exports and maintenance as time passes.
func (w *World) advance(d int64) {
	for d > 0 {
		s := min(d, 500e6)
		w.now += s
		d -= s
		w.spool.flush()
		w.node.pump()
		w.node.background()
		w.collect()
	}
}

// crash kills the node without warning and starts it again on the same
// ledger and spool: what was not durable is gone, clients waiting for an
// answer get none.
func (w *World) crash() {
	w.stats.Crashes++
	w.log("step %d: crash at %d", w.stats.Steps, w.now)
	// Calls in flight may or may not have reached the ledger.
	for _, c := range w.node.calls {
		if c.ingest == nil && w.rng.IntN(2) == 0 {
			w.runCall(context.Background(), c.call)
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
			if r.committed || r.finishing {
				a.maybe += r.quote // billed at its quote if its finish never became durable
			}
		}
		a.live = nil
	}
	w.node.close()
	w.spool.crash()
	w.advance0(w.rng.Int64N(20e9))
	w.node = w.startNode()
	w.node.boot()
}

// advance0 moves the clock with no node running.
func (w *World) advance0(d int64) { w.now += d }

// administer changes the ledger as the admin API would and tells the node.
func (w *World) administer() {
	ctx := context.Background()
	var changed ledger.Account
	var err error
	switch w.rng.IntN(5) {
	case 4: // a key rotated: the new one bound, the old one revoked
		w.rotateKey(w.accounts[w.rng.IntN(len(w.accounts))])
		return
	case 0: // a deposit
		id := []core.AccountID{"org", "solo", "a2"}[w.rng.IntN(3)]
		changed, _, err = w.store.Deposit(ctx, id, core.CostUnits(1000+w.rng.IntN(20_000)), "d"+strconv.Itoa(w.stats.Steps), w.now)
	case 1, 2: // suspend or reactivate a scope
		id := []core.AccountID{"ws", "org", "a1"}[w.rng.IntN(3)]
		st := core.StatusActive
		if w.rng.IntN(2) == 0 {
			st = core.StatusSuspended
		}
		changed, err = w.store.SetStatus(ctx, id, st)
	case 3: // a new policy generation
		a := w.accounts[w.rng.IntN(len(w.accounts))]
		policy := fmt.Sprintf(`{"permissions":["chat"],"operations":{"requests":{"weight":%d}},"limits":{"max_items":%d,"hold_timeout_ms":2000}}`, a.weight, 100+w.rng.IntN(5))
		changed, err = w.store.SetPolicy(ctx, a.id, []byte(policy))
	}
	if err != nil {
		w.fail("administer: %v", err)
	}
	if err := w.node.prov.AccountChanged(changed); err != nil {
		w.fail("publish %s: %v", changed.ID, err)
	}
}

// client sends one random request.
func (w *World) client() {
	a := w.pickAccount()
	t := w.node.transports[w.rng.IntN(len(w.node.transports))]
	w.stats.Requests++
	p := w.rng.IntN(10)
	if len(a.live) == 0 && p >= 8 {
		p = 0
	}
	if w.rng.IntN(25) == 0 {
		w.report(a, t)
		return
	}
	switch {
	case p < 4:
		n := 1 + w.rng.IntN(4)
		units := core.CostUnits(n) * a.weight
		body := `{"workload":[{"op":"requests","count":` + strconv.Itoa(n) + `}]}`
		w.await(t.serve("POST", "/v1/check", a.key, body, w.now), func(st int, m map[string]any) {
			if st == 200 {
				a.acked += units
			}
		}, func() { a.maybe += units })
	case p < 8:
		n := 1 + w.rng.IntN(4)
		body := `{"workload":[{"op":"requests","count":` + strconv.Itoa(n) + `}],"ttl_ms":` + strconv.Itoa(200+w.rng.IntN(3000)) + `}`
		w.await(t.serve("POST", "/v1/admit", a.key, body, w.now), func(st int, m map[string]any) {
			if st == 200 {
				a.live = append(a.live, &reservation{id: m["reservation"].(string), quote: core.CostUnits(m["quote"].(float64))})
			}
		}, nil)
	default:
		w.stage(a, t)
	}
}

// report sends one post-paid usage event for a, sometimes larger than what
// is left: the account's scopes go into debt. A 200 bills it; a 503
// (ledger unavailable) leaves it durable, to be billed by the exporter; a
// crash before the answer leaves it uncertain.
func (w *World) report(a *account, t *transport) {
	w.stats.Reports++
	units := core.CostUnits(1 + w.rng.IntN(50*int(a.weight)))
	if w.rng.IntN(10) == 0 {
		units *= 100
	}
	ev := `{"events":[{"id":"pp-` + strconv.Itoa(w.stats.Reports) + `","agent_id":"` + string(a.id) + `","units":` +
		strconv.FormatUint(uint64(units), 10) + `,"occurred_at":"` + time.Unix(0, w.now).UTC().Format(time.RFC3339) + `"}]}`
	w.await(t.serve("POST", "/v1/usage", platformToken, ev, w.now), func(st int, m map[string]any) {
		switch {
		case st == 200 && m["accepted"] == 1.0:
			w.stats.ReportsBilled++
			a.acked += units
		case st == 503:
			a.maybe += units
		default:
			w.fail("post-paid report of %d for %s: %d %v", units, a.id, st, m)
		}
	}, func() { a.maybe += units })
}

// rotateKey gives a a new key and revokes the old one, as the admin API's
// rotation without grace does; a's clients use the new key from now on.
func (w *World) rotateKey(a *account) {
	ctx := context.Background()
	w.stats.Rotations++
	key, id := "key-"+string(a.id)+"-"+strconv.Itoa(w.stats.Rotations), "k-"+strconv.Itoa(w.stats.Rotations)
	if err := w.store.AddKey(ctx, ledger.Key{ID: id, Account: a.id, Digest: digest(key), CreatedAt: w.now}); err != nil {
		w.fail("add key: %v", err)
	}
	w.node.prov.BindKey(digest(key), a.id)
	if _, err := w.store.RevokeKey(ctx, a.id, a.keyID); err != nil {
		w.fail("revoke key: %v", err)
	}
	w.node.prov.RevokeKey(digest(a.key))
	a.key, a.keyID = key, id
}

// stage moves one of a's reservations on: commit, finish or cancel, on any
// shard (another shard forwards it to the owner).
func (w *World) stage(a *account, t *transport) {
	r := a.live[w.rng.IntN(len(a.live))]
	body := `{"reservation":"` + r.id + `"}`
	switch {
	case !r.committed && w.rng.IntN(5) == 0:
		w.await(t.serve("POST", "/v1/cancel", a.key, body, w.now), func(st int, _ map[string]any) {
			if st == 200 {
				a.forget(r)
			}
		}, nil)
	case !r.committed:
		w.await(t.serve("POST", "/v1/commit", a.key, body, w.now), func(st int, _ map[string]any) {
			if st == 200 {
				r.committed = true
			}
		}, func() { a.maybe += r.quote })
	case !r.finishing:
		units := core.CostUnits(w.rng.Uint64N(uint64(r.quote) + 1))
		r.finishing = true
		body = `{"reservation":"` + r.id + `","units":` + strconv.FormatUint(uint64(units), 10) + `}`
		w.await(t.serve("POST", "/v1/finish", a.key, body, w.now), func(st int, _ map[string]any) {
			r.finishing = false
			if st == 200 {
				a.acked += units
				a.forget(r)
			}
		}, nil)
	}
}

func (a *account) forget(r *reservation) {
	for i, x := range a.live {
		if x == r {
			a.live = append(a.live[:i], a.live[i+1:]...)
			return
		}
	}
}

func (w *World) pickAccount() *account {
	if w.rng.IntN(3) > 0 {
		var hot []*account
		for _, a := range w.accounts {
			if a.hot {
				hot = append(hot, a)
			}
		}
		return hot[w.rng.IntN(len(hot))]
	}
	return w.accounts[w.rng.IntN(len(w.accounts))]
}

// await handles a request's answer now or when it comes.
func (w *World) await(r *request, done func(int, map[string]any), lost func()) {
	p := &pending{r: r, done: done, lost: lost}
	if r.done {
		w.answer(p)
		return
	}
	w.clients = append(w.clients, p)
}

func (w *World) answer(p *pending) {
	var m map[string]any
	if len(p.r.body) > 0 {
		if err := json.Unmarshal(p.r.body, &m); err != nil {
			w.fail("answer %d is not JSON: %q", p.r.status, p.r.body)
		}
	}
	if p.r.status == 200 {
		w.stats.Admitted++
	} else {
		w.stats.Refused++
		if p.r.status >= 500 && p.r.status != 503 {
			w.fail("answer %d %s", p.r.status, p.r.body)
		}
	}
	p.done(p.r.status, m)
}

// collect delivers answers that came since the last step.
func (w *World) collect() {
	n := 0
	for _, p := range w.clients {
		if p.r.done {
			w.answer(p)
			continue
		}
		w.clients[n] = p
		n++
	}
	clear(w.clients[n:])
	w.clients = w.clients[:n]
}

// check runs after every step.
func (w *World) check() {
	if err := w.store.Check(context.Background()); err != nil {
		w.fail("step %d: ledger: %v", w.stats.Steps, err)
	}
	for i, s := range w.node.shards {
		for _, a := range w.accounts {
			l, err := s.Engine().Lease(a.id)
			if err != nil {
				continue
			}
			if b := l.Balance(); !b.Conserved() {
				w.fail("step %d: shard %d, %s: lease slot %+v", w.stats.Steps, i, a.id, b)
			}
		}
	}
}

// drain stops traffic and lets the node settle: reservations lapse, usage
// is exported, idle leases are handed back.
func (w *World) drain() {
	for range 200 {
		w.advance(int64(float64(w.cfg.LeaseTTL) * 0.05))
		w.spool.flush()
		w.node.pump()
		w.collect()
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
	if err := w.node.exporter.Export(context.Background()); err != nil {
		w.fail("final export: %v", err)
	}
}

// checkEnd checks the drained world.
func (w *World) checkEnd() {
	ctx := context.Background()
	if active, err := w.store.Leases(ctx, true); err != nil || len(active) != 0 {
		for _, l := range active {
			w.log("%s: %s", l.Account, w.node.m.Debug(string(l.Account)))
			for i, s := range w.node.shards {
				if sl, err := s.Engine().Lease(l.Account); err == nil {
					w.log("  shard %d: token %d %+v", i, sl.Token(), sl.Balance())
				}
			}
		}
		w.fail("after draining, active leases: %+v, %v", active, err)
	}
	if next := w.node.m.Next(); next != 0 {
		w.fail("after draining, the plane still wants a tick at %d (now %d)", next, w.now)
	}
	if !w.node.m.Quiet() {
		w.fail("after draining, the plane is not quiet")
	}
	// Every root's settled usage is what its accounts' clients were told,
	// give or take what a crash left uncertain.
	lo, hi := map[core.AccountID]core.CostUnits{}, map[core.AccountID]core.CostUnits{}
	for _, a := range w.accounts {
		lo[a.root] += a.acked
		hi[a.root] += a.acked + a.maybe
	}
	for _, root := range []core.AccountID{"org", "solo"} {
		acct, err := w.store.Account(ctx, root)
		if err != nil {
			w.fail("%s: %v", root, err)
		}
		if acct.Settled < lo[root] || acct.Settled > hi[root] {
			w.fail("%s settled %d, clients were told %d (up to %d with what crashes left uncertain)", root, acct.Settled, lo[root], hi[root])
		}
		// Injected ledger errors do not excuse a loss: the funder retries
		// its releases and recovery runs against the ledger directly.
		if acct.Loss != 0 {
			w.fail("%s lost %d: a node that comes back forfeits nothing", root, acct.Loss)
		}
	}
	w.checkTraffic()
}

// checkTraffic bounds ledger calls: an account idle for long causes none
// once its lease is handed back, and a busy one renews, not churns.
func (w *World) checkTraffic() {
	w.stats.LedgerCalls = len(w.ledgerCalls)
	const perMinute = 60
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
			if j-i+1 > perMinute {
				w.fail("%s: %d ledger calls within a simulated minute ending at %d", a.id, j-i+1, times[j])
			}
		}
	}
	// The drained end: after three lease lifetimes of quiet, not one call.
	quiet := w.now - 2*w.cfg.LeaseTTL
	for _, c := range w.ledgerCalls {
		if c.at > quiet {
			w.fail("a ledger call (%s for %s) at %d, long after the last traffic", c.kind, c.account, c.at)
		}
	}
}

// String summarises a run.
func (s Stats) String() string {
	return strings.TrimSpace(fmt.Sprintf("%d steps, %d crashes, %d requests (%d answered 200, %d refused; %d post-paid reports, %d billed at once), %d key rotations, %d ledger calls",
		s.Steps, s.Crashes, s.Requests, s.Admitted, s.Refused, s.Reports, s.ReportsBilled, s.Rotations, s.LedgerCalls))
}
