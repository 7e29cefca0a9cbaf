package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/control/durability"
	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/fleet"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
	"github.com/tollgated/tollgated/spool"
)

// node is one incarnation of a tollgated node's process: real shards over
// real (small) rings, the daemon's control-plane shell (control.Shell)
// around the plane's state machine, the real recovery, exporter and
// provisioner — and the simulator in the place of the goroutines,
// sockets and timers: it delivers the ledger's answers, the fleet's
// announcements and the clock. A crash throws it away; the ledger and the
// spool's durable records (its data directory) outlive it.
type node struct {
	w      *World
	id     string // --node-id
	holder string // the incarnation's name on its leases
	sp     *memSpool
	sh     *control.Shell

	shards     []*shard.Shard
	in         []*ring.Doorbell[message.Inbound]
	out        []*ring.Doorbell[message.Outbound]
	transports []*transport
	storage    *shard.Storage
	prov       *control.Provisioner
	exporter   *control.Exporter
	claims     *control.PostPaidClaims

	// funds coalesces the fleet's funds announcements as the daemon's
	// fleet.Funds does; refreshing: a read is scheduled.
	funds      fleet.RefreshCadence
	refreshing bool
	// ledgerTx: when each of this node's ledger transactions of a cadence
	// began, by cadence, for the bound on its ledger traffic.
	ledgerTx [numCadences][]int64

	dead       bool
	nextExport int64
	nextMaint  int64
	// stalled: the last export released nothing (a commit still open
	// holds the spool's floor): no need to wake for the next one.
	stalled bool
}

// start runs what the daemon runs before it serves, on the data directory
// sp of node id: the incarnation, recovery, then the plane and shards, the
// ledger's state loaded and published, ready.
func (w *World) start(id string, sp *memSpool) *node {
	n := &node{w: w, id: id, sp: sp, claims: control.NewPostPaidClaims(), storage: new(shard.Storage)}
	ctx := context.Background()
	spoolInc, err := control.MatchSpool(w.cfg.Dir, "spool", "node-id", id, sp.identity())
	if err != nil {
		w.fail("node %s: %v", id, err)
	}
	inc, err := w.store.Incarnate(ctx, id, spoolInc, w.cfg.LeaseGrace, w.now)
	if err != nil {
		w.fail("node %s: incarnation: %v", id, err)
	}
	sp.owner, sp.node = inc.Number, id
	n.holder = inc.Holder()
	links := make([]control.Link, w.cfg.Shards)
	for i := range w.cfg.Shards {
		inR, _ := ring.New[message.Inbound](w.cfg.RingSize)
		outR, _ := ring.New[message.Outbound](w.cfg.RingSize)
		in, err := ring.NewDoorbell(inR)
		if err != nil {
			w.fail("doorbell: %v", err)
		}
		out, err := ring.NewDoorbell(outR)
		if err != nil {
			w.fail("doorbell: %v", err)
		}
		s, err := shard.New(shard.Config{ID: uint16(i), Secret: secret, MaxReservations: 1024, AckDurable: true,
			UsageHeadroom: 8, AckQueue: 256, FundingWait: w.cfg.FundingWait, Storage: n.storage}, in, out)
		if err != nil {
			w.fail("shard: %v", err)
		}
		n.shards, n.in, n.out = append(n.shards, s), append(n.in, in), append(n.out, out)
		n.transports = append(n.transports, newTransport(s))
		links[i] = control.Link{In: in, Out: out, Durable: s.DurableMark()}
	}
	// Recovery runs before the plane exists: it may spool bills for open
	// commits, and the plane numbers records after them.
	n.exporter = control.NewExporter(sp, w.store, n.holder, 64)
	n.exporter.Claims = n.claims
	n.exporter.Resume(sp.released)
	if _, err := control.RecoverWith(ctx, w.store, sp, n.exporter, control.RecoverOptions{Holder: n.holder, Now: w.now,
		SpoolCut: sp.cut > 0}); err != nil {
		w.fail("node %s: recover: %v", id, err)
	}
	m := plane.New(plane.Config{
		Shards: w.cfg.Shards,
		Funding: funding.Config{Holder: n.holder, TTL: w.cfg.LeaseTTL, MinLease: 1000, MinSlice: 100,
			Retry: 1e9},
		Durability: durability.Config{Next: sp.Appended() + 1, Durable: sp.Durable()},
		QueueSoft:  w.cfg.RingSize,
	})
	n.sh, err = control.NewShell(m, links, control.ShellIO{Spool: sp, IsFull: func(err error) bool { return errors.Is(err, spool.ErrFull) },
		Ledger: simLedger{n}, Hooks: simHooks{n}, Claims: n.claims})
	if err != nil {
		w.fail("shell: %v", err)
	}
	n.exporter.Floor = m.Floor
	n.exporter.Changed = func(ids []core.AccountID) {
		n.prov.UsageChanged(ids)
		w.fundsMoved(n, ids)
	}
	n.prov = control.NewProvisioner(target{n}, w.store)
	n.prov.Now = func() int64 { return w.now }
	n.prov.Grace = time.Duration(w.cfg.LeaseGrace)
	if _, _, err := n.prov.Load(ctx); err != nil {
		w.fail("node %s: load: %v", id, err)
	}
	n.provision(func() error { return m.Ready() })
	n.pump()
	n.nextExport, n.nextMaint = w.now, w.now
	return n
}

// close releases the node's descriptors.
func (n *node) close() {
	for i := range n.in {
		n.in[i].Close()
		n.out[i].Close()
	}
}

// provision runs a provisioning change, delivering queued messages while
// the machine says a shard's queue is full (the daemon's Plane retries
// too).
func (n *node) provision(f func() error) error {
	for range 1000 {
		err := f()
		if !errors.Is(err, plane.ErrBusy) {
			return err
		}
		n.pump()
	}
	n.w.fail("a provisioning change never found room")
	return nil
}

// pump runs the shell's passes and the shards' polls until neither finds
// anything to do (bounded): what the daemon's plane goroutine and the
// shards' loops do between two events.
func (n *node) pump() {
	if n.dead {
		return
	}
	for range 64 {
		worked := n.sh.Step(n.w.now)
		for _, s := range n.shards {
			worked += s.Poll(n.w.now)
		}
		if worked == 0 {
			return
		}
	}
}

// next is when the node next needs the clock: its machine's deadline, or
// its exporter's while the spool holds usage not yet exported (0: none).
// Maintenance runs whenever the clock passes its interval: a jump over an
// idle stretch runs it once at the jump's end, as a daemon's ticker that
// found nothing to do all along would have.
func (n *node) next() int64 {
	t := n.sh.Next()
	if n.sp.durable > n.sp.released && !n.stalled && (t == 0 || n.nextExport < t) {
		t = n.nextExport
	}
	return t
}

// background runs the exporter and the ledger's maintenance on their
// intervals, as the daemon's goroutines do; neither runs while the
// ledger is out of reach.
func (n *node) background() {
	w := n.w
	if n.dead || w.ledgerDown() {
		if w.now >= n.nextExport {
			n.nextExport = w.now + int64(control.SettleEvery)
		}
		if w.now >= n.nextMaint {
			n.nextMaint = w.now + 1e9
		}
		return
	}
	if w.now >= n.nextExport {
		n.nextExport = w.now + int64(control.SettleEvery)
		before, settled := n.sp.released, n.exporter.Stats().Settlements
		if err := n.exporter.Export(context.Background()); err != nil {
			w.fail("node %s: export: %v", n.id, err)
		}
		if n.exporter.Stats().Settlements > settled {
			// One pass: the daemon's batch holds a pass's records, the
			// simulator's small one splits them to test the batching.
			n.ledgerTx[exportPass] = append(n.ledgerTx[exportPass], w.now)
		}
		n.stalled = n.sp.released == before
	}
	if w.now >= n.nextMaint {
		n.nextMaint = w.now + 1e9
		if _, err := n.prov.MaintainOnce(); err != nil {
			w.fail("node %s: maintenance: %v", n.id, err)
		}
		n.ledgerTx[maintenancePass] = append(n.ledgerTx[maintenancePass], w.now)
		w.fundsMoved(n, nil) // a forfeit or a rollover may have moved anyone's funding
	}
}

// simLedger runs the shell's ledger work as events of the world: each
// call reaches the ledger after a latency the world draws, and its result
// comes back to the shell then — unless the node died meanwhile.
type simLedger struct{ n *node }

func (l simLedger) Call(c funding.Call) {
	n := l.n
	n.w.later(n.w.ledgerLatency(), n, func() {
		r := n.w.runCall(c)
		if !n.dead {
			n.sh.CallDone(r, n.w.now)
		}
	})
}

func (l simLedger) Ingest(in *plane.Ingest) {
	n := l.n
	n.w.later(n.w.ledgerLatency(), n, func() {
		if n.w.ledgerDown() || n.w.rng.Float64() < n.w.cfg.Faults.LedgerError {
			if !n.dead {
				n.sh.IngestDone(in, nil, errLedger)
			}
			return
		}
		res, err := n.w.store.Ingest(context.Background(), control.LedgerUsages(in.Events), n.w.now)
		if !n.dead {
			n.sh.IngestDone(in, control.IngestResults(res), err)
		}
	})
}

var errLedger = errors.New("sim: the ledger is unreachable")

// simHooks is the rest of the node as the shell reaches it.
type simHooks struct{ n *node }

func (h simHooks) FundingChanged(in *plane.Ingest, ids []core.AccountID) bool {
	n := h.n
	n.w.later(100e3, n, func() {
		if !n.w.ledgerDown() {
			n.prov.UsageChanged(ids)
			n.w.fundsMoved(n, ids)
		}
		if !n.dead {
			n.sh.Refreshed(in)
		}
	})
	return true
}

func (h simHooks) KeysUsed(keys []plane.KeyUsed) {
	if !h.n.w.ledgerDown() {
		h.n.prov.KeysUsed(keys)
	}
}

func (h simHooks) Announce(a plane.Announcement) {
	a.From = h.n.holder
	h.n.w.announce(h.n, a)
}

// target is the node as the Provisioner's Target.
type target struct{ n *node }

func (t target) Install(snap *core.Snapshot) error {
	return t.n.provision(func() error { return t.n.sh.Machine().Install(snap, t.n.w.now) })
}
func (t target) BindKey(d credential.Digest, id core.AccountID) error {
	return t.n.provision(func() error { return t.n.sh.Machine().Bind(d, id) })
}
func (t target) RevokeKey(d credential.Digest) error {
	return t.n.provision(func() error { return t.n.sh.Machine().Unbind(d) })
}
func (t target) BindPlatformToken(d credential.Digest) error {
	return t.n.provision(func() error { return t.n.sh.Machine().BindPlatform(d) })
}
func (t target) RevokePlatformToken(d credential.Digest) error {
	return t.n.provision(func() error { return t.n.sh.Machine().UnbindPlatform(d) })
}
func (t target) FundingChanged(evs map[core.AccountID]core.FundingEvidence, readAt int64) {
	for _, id := range slices.Sorted(maps.Keys(evs)) { // a seed replays exactly
		t.n.sh.Machine().Evidence(id, evs[id], readAt, t.n.w.now)
	}
}

// runCall runs one funding call against the ledger, or fails it without
// running it (the ledger is out of reach, or the call fails).
func (w *World) runCall(c funding.Call) funding.Result {
	w.ledgerCalls = append(w.ledgerCalls, ledgerCall{at: w.now, account: c.Account, kind: c.Kind})
	if w.ledgerDown() || w.rng.Float64() < w.cfg.Faults.LedgerError {
		return funding.Result{ID: c.ID, Outcome: funding.Failed, Detail: errLedger.Error()}
	}
	return control.RunCall(context.Background(), w.store, c, w.now)
}

// transport stands for a shard's event loop: it hands requests to the
// shard, parks the ones the shard defers, and delivers their answers.
type transport struct {
	s        *shard.Shard
	next     uint64
	open     map[uint64]*request
	cur      *request
	deferred bool
}

type request struct {
	status int
	body   []byte
	done   bool
	sent   int64 // when the client sent it
	at     int64 // when it was answered
}

func newTransport(s *shard.Shard) *transport {
	t := &transport{s: s, open: make(map[uint64]*request)}
	s.SetCompleter(func(ticket uint64, fill func(*fasthttp.Response)) {
		r := t.open[ticket]
		if r == nil {
			return
		}
		delete(t.open, ticket)
		var resp fasthttp.Response
		fill(&resp)
		r.status, r.body, r.done = resp.StatusCode(), append([]byte(nil), resp.Body()...), true
	})
	s.SetPending(func(ticket uint64) bool { return t.open[ticket] != nil })
	return t
}

// serve runs one request on the shard; the returned request is done now,
// or later, when the shard completes it.
func (t *transport) serve(method, path, key, body string, now int64) *request {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.SetBodyString(body)
	}
	r := &request{sent: now}
	t.cur, t.deferred = r, false
	t.s.Serve(&shard.Request{Req: req, Resp: resp, Now: now, Defer: t.park})
	t.cur = nil
	if !t.deferred {
		r.status, r.body, r.done = resp.StatusCode(), append([]byte(nil), resp.Body()...), true
	}
	return r
}

func (t *transport) park() uint64 {
	t.next++
	t.open[t.next] = t.cur
	t.deferred = true
	return t.next
}

func (n *node) String() string { return fmt.Sprintf("node %s (%s)", n.id, n.holder) }
