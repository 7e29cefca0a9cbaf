package sim

import (
	"cmp"
	"context"
	"errors"
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
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

// node is one incarnation of a tollgated node: the plane's state machine,
// real shards over real (small) rings, and the simulator acting as the
// shell around them. A crash throws it away; the ledger and the spool's
// durable records outlive it.
type node struct {
	w          *World
	m          *plane.Machine
	shards     []*shard.Shard
	in         []*ring.Doorbell[message.Inbound]
	out        []*ring.Doorbell[message.Outbound]
	transports []*transport
	prov       *control.Provisioner
	exporter   *control.Exporter
	claims     *control.PostPaidClaims
	calls      []timedCall // ledger calls in flight, by due time
	changed    []core.AccountID
	refreshed  []*plane.Ingest // post-paid batches whose accounts' evidence changed
	popBuf     [64]message.Outbound
	nextExport int64
	nextMaint  int64
}

// timedCall is a ledger call the simulator runs at its due time.
type timedCall struct {
	due    int64
	seq    uint64
	call   funding.Call
	ingest *plane.Ingest
}

func (w *World) startNode() *node {
	n := &node{w: w, claims: control.NewPostPaidClaims()}
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
			UsageHeadroom: 8, AckQueue: 256, FundingWait: w.cfg.FundingWait}, in, out)
		if err != nil {
			w.fail("shard: %v", err)
		}
		t := newTransport(s)
		n.shards, n.in, n.out, n.transports = append(n.shards, s), append(n.in, in), append(n.out, out), append(n.transports, t)
	}
	// Recovery runs before the plane exists: it may spool bills for open
	// commits, and the plane numbers records after them.
	n.exporter = control.NewExporter(w.spool, w.store, "sim-node", 64)
	n.exporter.Claims = n.claims
	n.exporter.Resume(w.spool.released)
	if _, err := control.Recover(context.Background(), w.store, w.spool, n.exporter, "sim-node", w.now); err != nil {
		w.fail("recover: %v", err)
	}
	n.m = plane.New(plane.Config{
		Shards: w.cfg.Shards,
		Funding: funding.Config{Holder: "sim-node", TTL: w.cfg.LeaseTTL, MinLease: 1000, MinSlice: 100,
			Retry: 1e9},
		Durability: durability.Config{Next: w.spool.Appended() + 1, Durable: w.spool.Durable()},
		QueueSoft:  w.cfg.RingSize,
	})
	n.exporter.Floor = n.m.Floor
	n.prov = control.NewProvisioner(target{n}, w.store)
	n.prov.Now = func() int64 { return w.now }
	n.prov.Grace = time.Duration(w.cfg.LeaseGrace)
	return n
}

// close releases the node's descriptors.
func (n *node) close() {
	for i := range n.in {
		n.in[i].Close()
		n.out[i].Close()
	}
}

// boot runs what the daemon runs before serving (after recovery, in
// startNode): the ledger's state published to every shard.
func (n *node) boot() {
	w := n.w
	if _, _, err := n.prov.Load(context.Background()); err != nil {
		w.fail("load: %v", err)
	}
	n.provision(func() error { return n.m.Ready() })
	n.pump()
	n.nextExport, n.nextMaint = w.now, w.now
}

// provision runs a provisioning change, delivering queued messages while
// the machine says a shard's queue is full (the real shell retries too).
func (n *node) provision(f func() error) error {
	for range 1000 {
		err := f()
		if !errors.Is(err, plane.ErrBusy) {
			return err
		}
		n.deliver()
		for i, s := range n.shards {
			s.Poll(n.w.now)
			n.popShard(i)
		}
	}
	n.w.fail("a provisioning change never found room")
	return nil
}

// target is the node as the Provisioner's Target.
type target struct{ n *node }

func (t target) Install(snap *core.Snapshot) error {
	return t.n.provision(func() error { return t.n.m.Install(snap, t.n.w.now) })
}
func (t target) BindKey(d credential.Digest, id core.AccountID) error {
	return t.n.provision(func() error { return t.n.m.Bind(d, id) })
}
func (t target) RevokeKey(d credential.Digest) error {
	return t.n.provision(func() error { return t.n.m.Unbind(d) })
}
func (t target) BindPlatformToken(d credential.Digest) error {
	return t.n.provision(func() error { return t.n.m.BindPlatform(d) })
}
func (t target) RevokePlatformToken(d credential.Digest) error {
	return t.n.provision(func() error { return t.n.m.UnbindPlatform(d) })
}
func (t target) FundingChanged(evs map[core.AccountID]core.FundingEvidence) {
	for _, id := range slices.Sorted(maps.Keys(evs)) { // a seed replays exactly
		t.n.m.Evidence(id, evs[id], t.n.w.now)
	}
}

// pump is one pass of the shell, as the real Plane's step does it:
// effects out, due ledger results in, rings both ways, durability, ticks.
func (n *node) pump() {
	w := n.w
	for range 64 { // until quiet, bounded
		worked := n.execute()
		worked += n.finishCalls()
		worked += n.deliver()
		for i, s := range n.shards {
			worked += s.Poll(w.now)
			worked += n.popShard(i)
		}
		n.m.SpoolDurable(w.spool.Durable())
		if next := n.m.Next(); next != 0 && w.now >= next {
			n.m.Tick(w.now)
			worked++
		}
		if len(n.changed) > 0 {
			ids := n.changed
			n.changed = nil
			n.prov.UsageChanged(ids)
			for _, in := range n.refreshed {
				n.m.Refreshed(in)
			}
			n.refreshed = n.refreshed[:0]
			worked++
		}
		if worked == 0 {
			return
		}
	}
}

func (n *node) popShard(i int) int {
	k := n.out[i].Ring().PopBatch(n.popBuf[:])
	for j := range k {
		n.m.FromShard(i, &n.popBuf[j], n.w.now)
		n.popBuf[j] = message.Outbound{}
	}
	return k
}

// deliver pushes each shard's queue into its ring as far as it has room
// and publishes the shards' durable marks.
func (n *node) deliver() int {
	sent := 0
	for i := range n.shards {
		q := n.m.Queue(i)
		if len(q) == 0 {
			continue
		}
		k := n.in[i].Ring().PushBatch(q)
		n.m.Sent(i, k, n.w.now)
		sent += k
	}
	for i, mark := range n.m.Marks() {
		if d := n.shards[i].DurableMark(); d.Load() != mark {
			d.Publish(mark)
			sent++
		}
	}
	return sent
}

// execute carries out the machine's effects.
func (n *node) execute() int {
	w := n.w
	effects := n.m.Effects()
	for i := range effects {
		e := &effects[i]
		switch e.Kind {
		case plane.EffectCall:
			n.schedule(timedCall{call: e.Call})
		case plane.EffectIngest:
			n.schedule(timedCall{ingest: e.Ingest})
		case plane.EffectAppend:
			for seq, rec := range n.m.Records(e) {
				got, err := w.spool.Append(rec)
				if err != nil || got != seq {
					// The real shell keeps a backlog when the spool is
					// full; the simulator's spool is full only between
					// steps.
					w.fail("spool append %d: got %d, %v", seq, got, err)
				}
				w.stats.spooled++
			}
		case plane.EffectPublish:
			if e.Clear {
				e.Cell.Clear()
			} else {
				e.Cell.Store(e.Evidence)
			}
		case plane.EffectClaim:
			n.claims.Claim(e.Ingest.Events)
		case plane.EffectUnclaim:
			n.claims.Unclaim(e.Ingest.Events)
		case plane.EffectFundingChanged:
			n.changed = append(n.changed, e.Accounts...)
			n.refreshed = append(n.refreshed, e.Ingest)
		}
	}
	k := len(effects)
	n.m.ClearEffects()
	return k
}

// schedule delays a ledger call by a latency the world draws.
func (n *node) schedule(c timedCall) {
	w := n.w
	c.due = w.now + w.ledgerLatency()
	w.callSeq++
	c.seq = w.callSeq
	n.calls = append(n.calls, c)
}

// finishCalls runs the ledger calls that are due, in due order.
func (n *node) finishCalls() int {
	w := n.w
	slices.SortStableFunc(n.calls, func(a, b timedCall) int {
		return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.seq, b.seq))
	})
	done := 0
	for len(n.calls) > 0 && n.calls[0].due <= w.now {
		c := n.calls[0]
		n.calls = n.calls[1:]
		done++
		ctx := context.Background()
		if c.ingest != nil {
			if w.rng.Float64() < w.cfg.Faults.LedgerError {
				n.m.IngestDone(c.ingest, nil, errLedger)
				continue
			}
			res, err := w.store.Ingest(ctx, control.LedgerUsages(c.ingest.Events), w.now)
			n.m.IngestDone(c.ingest, control.IngestResults(res), err)
			continue
		}
		n.m.LedgerDone(w.runCall(ctx, c.call), w.now)
	}
	return done
}

var errLedger = errors.New("sim: the ledger is unreachable")

// runCall runs one funding call against the ledger, or fails it without
// running it (the ledger-unavailable fault).
func (w *World) runCall(ctx context.Context, c funding.Call) funding.Result {
	r := funding.Result{ID: c.ID}
	w.ledgerCalls = append(w.ledgerCalls, ledgerCall{at: w.now, account: c.Account, kind: c.Kind})
	if w.rng.Float64() < w.cfg.Faults.LedgerError {
		r.Outcome, r.Detail = funding.Failed, errLedger.Error()
		return r
	}
	return control.RunCall(ctx, w.store, c, w.now)
}

// background runs the exporter and the ledger's maintenance on their
// intervals.
func (n *node) background() {
	w := n.w
	if w.now >= n.nextExport {
		n.nextExport = w.now + 100e6
		if err := n.exporter.Export(context.Background()); err != nil {
			w.fail("export: %v", err)
		}
	}
	if w.now >= n.nextMaint {
		n.nextMaint = w.now + 1e9
		if _, err := n.prov.MaintainOnce(); err != nil {
			w.fail("maintenance: %v", err)
		}
	}
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
	r := &request{}
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
