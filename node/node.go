//go:build linux

// Package node assembles one tollgated node: a shard per CPU, each on its
// own pinned thread with its own SO_REUSEPORT listener and epoll loop
// (httploop), and the control plane goroutine they reach through rings.
package node

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/affinity"
	"github.com/tollgated/tollgated/clock"
	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/grpcapi"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

// Config describes a node.
type Config struct {
	Listen string // data-plane address every shard binds
	// CPUs lists one CPU per shard; a shard is pinned to its CPU.
	CPUs            []int
	Secret          []byte // server secret for customer key digests
	MaxReservations int    // per shard
	Loop            httploop.Config
	// Plane configures the control plane: its ledger, spool and funding.
	Plane control.Config
	// Durable makes the shards hold answers that report usage until the
	// plane's spool (Plane.Spool) says the usage is on disk.
	Durable bool
	// FundingWait bounds how long (ns) a request refused for want of
	// funding on its shard waits for the refill before it is answered:
	// 0 means shard.DefaultFundingWait, negative none.
	FundingWait int64
	// DrainUsage, if set, runs during Shutdown after every reservation has
	// ended and the leases are released: it should make all usage durable
	// and bill it (spool sync, export to the ledger).
	DrainUsage func(deadline time.Time)
	// RingSize is each ring's capacity (a power of two). Default 8192.
	RingSize int
	// KeyUseReport is how often (ns) each shard reports the keys used on
	// it (shard.Config.KeyUseReport).
	KeyUseReport int64
	// Storage, if set, is the spool's health as the shards read it: they
	// refuse requests that would bill while it is not StorageOK.
	Storage *shard.Storage
	Log     zerolog.Logger
	// GRPCListen, when set, is the address every shard also binds for
	// the gRPC services (ServeGRPC says how they are served).
	GRPCListen string
	// AuthzKeyHeader is shard.Config.AuthzKeyHeader.
	AuthzKeyHeader string
	// Clock is the shards' time (their loops' readings plus its offset)
	// and, unless Plane.Clock is set, the plane's. nil: the wall clock.
	Clock *clock.Clock
}

// Node is a running node.
type Node struct {
	cfg      Config
	plane    *control.Plane
	runners  []*runner
	addr     string
	grpcAddr string
	grpc     *GRPC // set by ServeGRPC
	stop     chan struct{}
	planeWG  sync.WaitGroup
	loopWG   sync.WaitGroup
	shutdown sync.Once
}

// Start brings a node up and opens it: Bind, StartPlane, then Open. It is
// for nodes whose shards need no initial state (tests, benchmarks); a
// daemon binds, starts the plane, provisions, then opens.
func Start(cfg Config) (*Node, error) {
	n, err := Bind(cfg)
	if err != nil {
		return nil, err
	}
	n.StartPlane()
	if err := n.Open(time.Now().Add(openTimeout)); err != nil {
		n.Shutdown(time.Now())
		return nil, err
	}
	return n, nil
}

// Bind brings a node up without serving: rings, shards, the control plane
// (stopped until StartPlane), and each shard's listener bound to the
// address but not listening. The
// port is held (another process cannot take it, see httploop.CheckFree) and
// clients are refused until Open. Start the plane, provision the shards
// through it, then call Open; Shutdown ends a node in any of these states.
//
// The caller sizes GOMAXPROCS: each shard's locked thread holds a Go
// scheduler slot whenever it is not blocked in a syscall (cmd/tollgated).
func Bind(cfg Config) (*Node, error) {
	if len(cfg.CPUs) == 0 {
		return nil, errors.New("node: no CPUs to run shards on")
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = 8192
	}
	// Refuse an address another process serves before taking it: with
	// SO_REUSEPORT the kernel would otherwise let both serve it, and split
	// the clients between two nodes that know different keys.
	if err := httploop.CheckFree(cfg.Listen); err != nil {
		return nil, fmt.Errorf("node: data-plane address: %w", err)
	}
	if cfg.GRPCListen != "" {
		if err := httploop.CheckFree(cfg.GRPCListen); err != nil {
			return nil, fmt.Errorf("node: gRPC address: %w", err)
		}
	}
	cfg.Plane.Syncing = new(shard.SpoolSyncing) // one per node, its shards and plane
	if cfg.Plane.Clock == nil {
		cfg.Plane.Clock = cfg.Clock
	}
	n := &Node{cfg: cfg, stop: make(chan struct{})}
	links := make([]control.Link, len(cfg.CPUs))
	addr, gaddr := cfg.Listen, cfg.GRPCListen
	for i, cpu := range cfg.CPUs {
		r, link, err := newRunner(i, cpu, addr, gaddr, cfg)
		if err != nil {
			n.closeRunners()
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		// Later shards bind the ports the first one got.
		addr = r.ln.Addr().String()
		if r.gln != nil {
			gaddr = r.gln.Addr().String()
		}
		links[i] = link
		n.runners = append(n.runners, r)
	}
	n.addr, n.grpcAddr = addr, gaddr
	p, err := control.New(cfg.Plane, links)
	if err != nil {
		n.closeRunners()
		return nil, err
	}
	n.plane = p
	return n, nil
}

// StartPlane runs the control plane. Bind leaves it stopped so that what
// its effects reach (Plane.FundingChanged, KeysUsed, Announce) can be
// built around it first; provisioning and Open need it running. Call it
// once, after Bind.
func (n *Node) StartPlane() {
	n.planeWG.Add(1)
	go func() { defer n.planeWG.Done(); n.plane.Run(n.stop) }()
}

// openTimeout bounds how long Start waits for the shards to take what the
// plane has queued for them.
const openTimeout = 30 * time.Second

// Open starts serving: it applies on every shard everything the plane has
// sent so far (what Provisioner.Load published: accounts, keys, platform
// tokens, evidence), and only then makes the listeners listen and starts
// each shard's loop. So no client reaches a shard that would answer a
// valid key 401 for want of its state. It fails if the plane still has
// messages in flight at deadline. Call it once, after Bind.
func (n *Node) Open(deadline time.Time) error {
	if !n.deliverAll(deadline) {
		return errors.New("node: the shards did not take their initial state before the deadline")
	}
	if n.cfg.GRPCListen != "" && n.grpc == nil {
		return errors.New("node: a gRPC address is bound but nothing serves it (ServeGRPC)")
	}
	for _, r := range n.runners {
		if err := r.ln.Open(); err != nil {
			return err
		}
		if r.gln != nil {
			if err := r.gln.Open(); err != nil {
				return err
			}
		}
	}
	started := make(chan error, len(n.runners))
	for _, r := range n.runners {
		n.loopWG.Add(1)
		go func() { defer n.loopWG.Done(); r.run(started, n.grpc, len(n.runners), n.cfg.Log) }()
	}
	var firstErr error
	for range n.runners {
		if err := <-started; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// deliverAll drives the shards from this goroutine (no loop runs yet, so
// none owns them) until the plane has nothing queued for any shard and
// every shard has applied what it popped: Poll applies a message before it
// returns. It reports whether that happened before deadline.
func (n *Node) deliverAll(deadline time.Time) bool {
	for {
		busy := 0
		for _, r := range n.runners {
			busy += r.s.Poll(n.cfg.Clock.Now())
		}
		if busy == 0 && n.plane.Idle() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		if busy == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// GRPC is how the shards serve the gRPC services on Config.GRPCListen.
type GRPC struct {
	Shared *grpcapi.Shared
	// MaxStreams bounds the calls in flight on one connection;
	// MaxHeaderListBytes a call's headers; MaxConns the node's gRPC
	// connections (each shard takes its share).
	MaxStreams         uint32
	MaxHeaderListBytes int
	MaxConns           int
}

// ServeGRPC says how the shards serve the gRPC address Bind bound; call it
// after Bind and before Open.
func (n *Node) ServeGRPC(g GRPC) error {
	if n.cfg.GRPCListen == "" {
		return errors.New("node: no gRPC address is bound")
	}
	h := grpcapi.H2(g.MaxStreams, g.MaxHeaderListBytes)
	if err := h.Validate(); err != nil {
		return err
	}
	if g.Shared == nil || g.MaxConns < 1 {
		return errors.New("node: the gRPC services and a connection bound must be given")
	}
	n.grpc = &g
	return nil
}

// GRPCAddr is the address the shards serve gRPC on, "" without one.
func (n *Node) GRPCAddr() string { return n.grpcAddr }

// Plane is the node's control plane, for provisioning.
func (n *Node) Plane() *control.Plane { return n.plane }

// Addr is the data-plane address the shards listen on.
func (n *Node) Addr() string { return n.addr }

// Shards reports each shard's CPU and whether it is pinned there.
func (n *Node) Shards() []ShardInfo {
	out := make([]ShardInfo, len(n.runners))
	for i, r := range n.runners {
		out[i] = ShardInfo{ID: i, CPU: r.cpu, Pinned: r.pinned}
	}
	return out
}

// ShardInfo describes one shard.
type ShardInfo struct {
	ID, CPU int
	Pinned  bool
}

// ShardStats returns each shard's published counters.
func (n *Node) ShardStats() []shard.Stats {
	out := make([]shard.Stats, len(n.runners))
	for i, r := range n.runners {
		out[i] = r.s.Stats()
	}
	return out
}

// Latency returns the shards' latency histograms, summed, and how many
// postponed answers went untimed (shard/latency.go).
func (n *Node) Latency() (sum shard.Latency, untimed uint64) {
	var one shard.Latency
	for _, r := range n.runners {
		untimed += r.s.Latency(&one)
		for i := range sum {
			sum[i].Add(&one[i])
		}
	}
	return sum, untimed
}

// Stats sums the shards' transport counters.
func (n *Node) Stats() []httploop.Stats {
	out := make([]httploop.Stats, len(n.runners))
	for i, r := range n.runners {
		if r.loop != nil {
			out[i] = r.loop.Stats()
		}
	}
	return out
}

// Shutdown stops the node in the seed's safe order: stop accepting and let
// requests in flight finish (until deadline); end every reservation still
// held (pending ones free, committed ones billed at their quote); hand every
// node lease back — each shard returns its unspent units, and each lease is
// released to the ledger, once its usage is durable, claiming exactly what
// came back, so its units return to the balance; drain usage (DrainUsage:
// durable and billed); then stop the control plane.
// A second call does nothing.
func (n *Node) Shutdown(deadline time.Time) {
	n.shutdown.Do(func() { n.shutdownOnce(deadline) })
}

func (n *Node) shutdownOnce(deadline time.Time) {
	leaseWait := 5 * time.Second
	if n.storageDegraded() {
		deadline, leaseWait = earliest(deadline, time.Now().Add(degradedWait)), degradedWait
	}
	for _, r := range n.runners {
		if r.loop != nil {
			r.loop.Drain(deadline)
		}
	}
	n.loopWG.Wait()
	if n.plane != nil {
		// The loops have stopped, so this goroutine may drive the shards.
		for _, r := range n.runners {
			r.s.Quiesce()
		}
		n.plane.HandBackLeases()
		n.pollUntil(time.Now().Add(leaseWait), n.plane.LeasesReleased)
		if n.cfg.DrainUsage != nil {
			n.cfg.DrainUsage(deadline)
		}
	}
	close(n.stop)
	n.planeWG.Wait()
	n.closeRunners()
}

// pollUntil drives the stopped shards (applying what the plane sends
// them) until done reports true or the deadline passes.
func (n *Node) pollUntil(deadline time.Time, done func() bool) {
	for time.Now().Before(deadline) {
		busy := 0
		for _, r := range n.runners {
			busy += r.s.Poll(n.cfg.Clock.Now())
		}
		if busy == 0 && done() {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (n *Node) closeRunners() {
	for _, r := range n.runners {
		r.close()
	}
}

// runner is one shard and its loop.
type runner struct {
	cfgLoop httploop.Config
	id, cpu int
	pinned  bool
	s       *shard.Shard
	in      *ring.Doorbell[message.Inbound]
	out     *ring.Doorbell[message.Outbound]
	ln      *httploop.Listener
	gln     *httploop.Listener // the gRPC address's; nil without one
	loop    *httploop.Loop

	clock   *clock.Clock // its offset is added to the loop's readings
	req     shard.Request
	cur     *httploop.Ctx
	now     int64 // the last tick's reading, on clock
	closeMu sync.Once

	// grpc serves the calls of the shard's gRPC connections; nil without
	// them.
	grpc *grpcapi.Service
	// The shard.Request's Defer while it serves a connection's request:
	// bound once, in newRunner.
	deferConn func() uint64
}

func newRunner(id, cpu int, addr, gaddr string, cfg Config) (*runner, control.Link, error) {
	r := &runner{id: id, cpu: cpu, cfgLoop: cfg.Loop, clock: cfg.Clock}
	inR, err := ring.New[message.Inbound](cfg.RingSize)
	if err != nil {
		return nil, control.Link{}, err
	}
	outR, err := ring.New[message.Outbound](cfg.RingSize)
	if err != nil {
		return nil, control.Link{}, err
	}
	if r.in, err = ring.NewDoorbell(inR); err != nil {
		return nil, control.Link{}, err
	}
	if r.out, err = ring.NewDoorbell(outR); err != nil {
		r.in.Close()
		return nil, control.Link{}, err
	}
	r.deferConn = func() uint64 { return uint64(r.cur.Defer()) }
	r.s, err = shard.New(shard.Config{ID: uint16(id), Secret: cfg.Secret, MaxReservations: cfg.MaxReservations,
		AckDurable: cfg.Durable, FundingWait: cfg.FundingWait, KeyUseReport: cfg.KeyUseReport,
		Syncing: cfg.Plane.Syncing, Storage: cfg.Storage, AuthzKeyHeader: cfg.AuthzKeyHeader, Clock: cfg.Clock}, r.in, r.out)
	if err == nil {
		r.ln, err = httploop.Bind(addr)
	}
	if err == nil && gaddr != "" {
		r.gln, err = httploop.Bind(gaddr)
	}
	if err != nil {
		r.close()
		return nil, control.Link{}, err
	}
	return r, control.Link{In: r.in, Out: r.out, Durable: r.s.DurableMark()}, nil
}

// run pins the thread, builds the loop and runs it until it drains.
func (r *runner) run(started chan<- error, g *GRPC, shards int, log zerolog.Logger) {
	err := affinity.Pin(r.cpu)
	r.pinned = err == nil
	if err != nil && !errors.Is(err, affinity.ErrUnsupported) {
		log.Warn().Int("shard", r.id).Int("cpu", r.cpu).Err(err).Msg("pinning failed; shard runs unpinned")
	}
	lc := r.loopConfig(g, shards)
	loop, err := httploop.New(r.ln, r.handle, lc)
	if err != nil {
		started <- err
		return
	}
	r.loop = loop
	r.req.Defer = r.deferConn
	if g != nil {
		r.grpc = g.Shared.NewService(loop, r.decide, r.in.Notify)
	}
	r.s.SetCompleter(func(ticket uint64, fill func(*fasthttp.Response)) {
		if grpcapi.IsTicket(ticket) {
			r.grpc.Complete(ticket, fill)
			return
		}
		loop.Complete(httploop.Deferred(ticket), fill)
	})
	r.s.SetPending(func(ticket uint64) bool {
		if grpcapi.IsTicket(ticket) {
			return r.grpc.Pending(ticket)
		}
		return loop.Pending(httploop.Deferred(ticket))
	})
	started <- nil
	if err := loop.Run(); err != nil {
		log.Error().Int("shard", r.id).Err(err).Msg("shard loop failed")
	}
	if r.grpc != nil {
		// The connections are closed: the calls the shard still owes a
		// decision have no stream to be answered on. Their tickets go
		// stale, and nothing more is decided for them.
		r.grpc.Stop()
	}
}

func (r *runner) loopConfig(g *GRPC, shards int) httploop.Config {
	lc := r.cfgLoop
	lc.Wake = r.s.Waker()
	lc.OnWake = func() { r.s.Poll(r.now) }
	lc.Quiet = r.s.Quiet
	lc.BeforeBlock = r.s.HandOver
	lc.OnTick = func(now int64) {
		now += int64(r.clock.Offset())
		r.now = now
		r.s.Poll(now)
		r.s.PublishStats()
	}
	if g == nil {
		return lc
	}
	// The gRPC service is made with the loop (run); these run only once
	// the loop does.
	lc.GRPC = &httploop.GRPC{Listener: r.gln, H2: grpcapi.H2(g.MaxStreams, g.MaxHeaderListBytes),
		Handler: func(x *httploop.StreamCtx) { r.grpc.Handle(x) }, MaxConns: max(g.MaxConns/shards, 1)}
	// A decision the shard completes in its pass (Poll) carries its call
	// on after the pass: a call's next descriptor is a new decision.
	lc.OnWake = func() {
		r.s.Poll(r.now)
		r.grpc.CarryOn()
	}
	lc.Quiet = func() bool { return r.s.Quiet() && r.grpc.Quiet() }
	lc.Holding = func() bool { return r.grpc.Holding() }
	lc.OnDrain = func() { r.grpc.Drain() }
	tick := lc.OnTick
	lc.OnTick = func(now int64) {
		tick(now)
		r.grpc.Tick(r.now)
	}
	return lc
}

// decide serves a gRPC call's forward-auth request on the shard's thread,
// as handle serves a connection's request.
func (r *runner) decide(req *fasthttp.Request, resp *fasthttp.Response, postpone func() uint64) {
	r.req.Req, r.req.Resp, r.req.Now, r.req.Defer = req, resp, r.now, postpone
	r.s.Serve(&r.req)
	r.req.Defer = r.deferConn
}

// handle serves one request on the shard's thread. The shard.Request is
// reused: nothing is allocated per request.
func (r *runner) handle(x *httploop.Ctx) {
	r.cur = x
	r.req.Req, r.req.Resp, r.req.Now = x.Request, x.Response, x.Now+int64(r.clock.Offset())
	r.s.Serve(&r.req)
	r.cur = nil
}

func (r *runner) close() {
	r.closeMu.Do(func() {
		if r.loop == nil {
			if r.ln != nil {
				r.ln.Close()
			}
			if r.gln != nil {
				r.gln.Close()
			}
		}
		if r.in != nil {
			r.in.Close()
		}
		if r.out != nil {
			r.out.Close()
		}
	})
}
