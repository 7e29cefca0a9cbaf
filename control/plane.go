// Package control runs tollgated's control plane: the shell around its
// state machine (control/plane). The Shell pops the shards' rings, feeds
// what it finds to the machine, and carries out what the machine asks —
// shard messages into rings, ledger calls, records into the usage spool,
// evidence into the cells shards read; the Plane runs it on one goroutine
// that sleeps until the machine's next deadline or the next input, with
// the ledger's work on a worker goroutine. The simulator runs the same
// Shell on a virtual clock. The package
// also holds what surrounds the plane: the Provisioner (ledger → shards),
// the Exporter (spool → ledger) and Recover (same-node recovery at start).
package control

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgated/tollgated/clock"
	"github.com/tollgated/tollgated/control/durability"
	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/control/shares"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/pollfile"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

// Link is what joins the plane and one shard: a ring each way and the
// shard's durable mark.
type Link struct {
	In      *ring.Doorbell[message.Inbound]  // plane → shard
	Out     *ring.Doorbell[message.Outbound] // shard → plane
	Durable *shard.DurableMark               // plane → shard: its events on disk
}

// Spool is where the plane makes usage durable: spool.Spool satisfies it.
// Append must not block on disk and numbers records consecutively; Durable
// reports the highest sequence on disk.
type Spool interface {
	Append(payload []byte) (uint64, error)
	Durable() uint64
}

// Config sets up a plane.
type Config struct {
	Store ledger.Store // required: node leases and post-paid usage
	Spool Spool        // required: durable usage
	// Appended is the spool's last sequence at start (0: empty), so the
	// machine numbers records as the spool will.
	Appended uint64
	// IsFull reports whether an Append error is transient backpressure;
	// any other error means the spool is broken.
	IsFull func(error) bool

	Holder string // this node's id, recorded on the leases it holds
	Lease  LeaseConfig

	// Slice is the smallest slice of a lease a shard gets; MaxSlice the
	// largest (10,000 and 2^32).
	Slice, MaxSlice core.CostUnits

	// Claims, shared with the Exporter, keeps it from billing post-paid
	// events the plane is billing itself.
	Claims *PostPaidClaims
	// FundingChanged, if set, hears (on its own goroutine) of accounts
	// whose balances post-paid usage moved.
	FundingChanged func(ids []core.AccountID)
	// KeysUsed, if set, hears (on its own goroutine) which keys
	// authenticated lately, for their last use (Provisioner.KeysUsed).
	KeysUsed func(keys []plane.KeyUsed)
	// Syncing, shared with the shards, is stored after every pass: whether
	// records this plane appended are not yet durable (shard.SpoolSyncing).
	Syncing *shard.SpoolSyncing
	// Announce, if set, tells the other nodes of a fleet what this one
	// asks of them or gave back (on the hooks' goroutine; best effort).
	Announce func(a plane.Announcement)
	// KeyUseFlush batches key-use reports for KeysUsed (5 s).
	KeyUseFlush time.Duration
	// Clock is the node's time: Now reads it unless set, and a jump of
	// it wakes the plane to measure its deadlines again. nil: the wall clock.
	Clock *clock.Clock
	// Now reads the clock; simulations inject a virtual one.
	Now func() int64
}

// LeaseConfig sets how node leases are taken from the ledger.
type LeaseConfig struct {
	TTL         time.Duration  // a node lease's lifetime (60 s)
	MinLease    core.CostUnits // the smallest lease asked for (10,000)
	Retry       time.Duration  // after a refusal, how long before asking again on its own (1 s)
	CallTimeout time.Duration  // bounds every ledger call (5 s)
}

// Plane is the running control plane. Its exported methods other than Run
// are safe to call from any goroutine: they hand work to the plane's
// goroutine and wait for it.
type Plane struct {
	cfg      Config
	links    []Link
	sh       *Shell
	m        *plane.Machine // sh's: only the plane's goroutine touches it
	worker   *ledgerWorker
	hooks    *planeHooks
	cmds     chan func()
	ended    chan struct{} // closed when Run has returned: nothing reads cmds any more
	ready    atomic.Bool   // MarkReady succeeded: provisioning waits for delivery
	kick     chan struct{}
	lastWork int64

	mu    sync.Mutex // guards floor, read by the exporter's goroutine
	floor uint64
}

// New builds a plane over links. Run starts it.
func New(cfg Config, links []Link) (*Plane, error) {
	if len(links) == 0 || len(links) > 1<<15 {
		return nil, errors.New("control: need 1 to 32768 shards")
	}
	if cfg.Store == nil || cfg.Spool == nil {
		return nil, errors.New("control: a plane needs a ledger and a spool")
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	if cfg.IsFull == nil {
		cfg.IsFull = func(error) bool { return false }
	}
	if cfg.Lease.CallTimeout <= 0 {
		cfg.Lease.CallTimeout = 5 * time.Second
	}
	m := plane.New(plane.Config{
		Shards: len(links),
		Funding: funding.Config{Holder: cfg.Holder, TTL: int64(cfg.Lease.TTL), MinLease: cfg.Lease.MinLease,
			Retry: int64(cfg.Lease.Retry), MinSlice: cfg.Slice, MaxSlice: cfg.MaxSlice},
		Shares:      shares.Config{},
		Durability:  durability.Config{Next: cfg.Appended + 1, Durable: cfg.Spool.Durable()},
		KeyUseFlush: int64(cfg.KeyUseFlush),
	})
	p := &Plane{cfg: cfg, links: links, m: m, cmds: make(chan func(), 1024), kick: make(chan struct{}, 1),
		ended: make(chan struct{})}
	p.worker = newLedgerWorker(cfg.Store, cfg.Lease.CallTimeout, p.post)
	p.hooks = newPlaneHooks(p, cfg.FundingChanged, cfg.KeysUsed, cfg.Announce)
	sh, err := NewShell(m, links, ShellIO{Spool: cfg.Spool, IsFull: cfg.IsFull, Ledger: planeLedger{p},
		Hooks: p.hooks, Claims: cfg.Claims, Syncing: cfg.Syncing})
	if err != nil {
		return nil, err
	}
	p.sh = sh
	p.floor = cfg.Spool.Durable()
	return p, nil
}

// post queues fn for the plane's goroutine without waiting for it; once
// the plane has stopped, fn is dropped.
func (p *Plane) post(fn func()) {
	select {
	case p.cmds <- fn:
	case <-p.ended:
	}
}

// Kick wakes the plane now (the spool calls it when usage becomes durable).
func (p *Plane) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// do runs fn on the plane's goroutine with the machine and waits for it,
// reporting whether fn ran. Once the plane has stopped, fn does not run
// and do returns at once: a publisher racing the node's shutdown (the
// fleet's followers, the provisioner) must not wait forever for a loop
// that is gone.
func (p *Plane) do(fn func(m *plane.Machine, now int64)) bool {
	done := make(chan struct{})
	select {
	case p.cmds <- func() { fn(p.m, p.cfg.Now()); close(done) }:
	case <-p.ended:
		return false
	}
	select {
	case <-done:
		return true
	case <-p.ended:
		// Run drains nothing after it ends: fn ran only if it was
		// taken before.
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// ErrStopped reports a change offered to a plane that has stopped.
var ErrStopped = errors.New("control: the plane has stopped")

// Run is the plane's loop; it returns when stop is closed.
func (p *Plane) Run(stop <-chan struct{}) {
	defer close(p.ended) // last: the worker's results still run below
	p.worker.start()
	defer p.stopWorker()
	p.hooks.start()
	defer p.serveUntil(p.hooks.stop)
	bells := p.watchBells()
	defer func() {
		for _, f := range bells {
			f.Close()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		default:
		}
		worked := p.step()
		if worked == 0 {
			p.sleep(stop, timer)
		}
	}
}

// step is one pass: commands, then the shell's pass.
func (p *Plane) step() int {
	now := p.cfg.Now()
	worked := p.drainCommands()
	worked += p.sh.Step(now)
	p.publish()
	if worked > 0 {
		p.lastWork = now
	}
	return worked
}

// busyWindow: after work within it the plane naps on busyBeat (routine
// shard messages ring no doorbell then); otherwise it sleeps until its
// next deadline or an input.
//
// Go's timers wait in epoll_wait, whose timeout is whole milliseconds:
// when nothing else wakes the scheduler first, a 250 µs nap lasts about
// 1.1 ms (BENCHMARKS.md); under load the scheduler usually runs the timer
// sooner. Measured at 64 connections, durable /v1/check: a 2 ms beat gave
// 15.5–17.3k/s against 21.2–23.1k/s for this one; a 1 ms beat halved the
// fdatasyncs and cost 31% of the throughput; a precise 250 µs beat (a
// timerfd) cost 11–13% of it and 1.33× the CPU per check, its batches
// smaller (16 checks a sync against 25). Since shards hand their outbox
// over when they go idle (shard.HandOver) the beat matters little.
const (
	busyWindow = int64(50e6)
	busyBeat   = 250 * time.Microsecond
)

// sleep parks the plane as a goroutine (a channel, a timer, doorbells read
// through Go's netpoller), never in a blocking system call of its own: a
// thread blocked in poll(2) kept the Go scheduler's monitor waking every
// 20 µs on the CPUs the shards need.
func (p *Plane) sleep(stop <-chan struct{}, timer *time.Timer) {
	jumped := p.cfg.Clock.Jumped() // before now: a jump after it wakes us
	now := p.cfg.Now()
	busy := now-p.lastWork < busyWindow || p.sh.Undelivered() || p.sh.Backlog() > 0
	announced := 0
	for _, l := range p.links {
		ok := false
		if busy {
			ok = l.Out.BeginNap()
		} else {
			ok = l.Out.BeginSleep()
		}
		if !ok {
			break
		}
		announced++
	}
	defer func() {
		for _, l := range p.links[:announced] {
			l.Out.EndSleep()
		}
	}()
	if announced < len(p.links) {
		return
	}
	var wait time.Duration = -1
	if busy {
		wait = busyBeat
	}
	if next := p.m.Next(); next != 0 {
		if d := time.Duration(next - now); wait < 0 || d < wait {
			wait = max(d, 0)
		}
	}
	var timeout <-chan time.Time
	if wait >= 0 {
		timer.Reset(wait)
		timeout = timer.C
		defer func() {
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}()
	}
	select {
	case <-stop:
	case <-p.kick:
	case fn := <-p.cmds:
		fn()
	case <-timeout:
	case <-jumped:
	}
}

func (p *Plane) drainCommands() int {
	n := 0
	for {
		select {
		case fn := <-p.cmds:
			fn()
			n++
		default:
			return n
		}
	}
}

// publish makes the floor and the report readable from other goroutines.
func (p *Plane) publish() {
	p.mu.Lock()
	p.floor = p.m.Floor()
	p.mu.Unlock()
}

// Floor is the highest spool sequence the exporter may release.
func (p *Plane) Floor() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.floor
}

// watchBells reads every shard's outbound doorbell through Go's netpoller
// (a duplicate of its eventfd, package pollfile), turning a ring
// into a kick on a channel. A doorbell that cannot be watched leaves that
// shard on the busy beat alone.
func (p *Plane) watchBells() []*os.File {
	var files []*os.File
	for i, l := range p.links {
		f, err := pollfile.Open(l.Out.FD(), "doorbell-"+strconv.Itoa(i))
		if err != nil {
			continue
		}
		files = append(files, f)
		go func() {
			var buf [8]byte
			for {
				if _, err := f.Read(buf[:]); err != nil {
					return
				}
				p.Kick()
			}
		}()
	}
	return files
}

// stopWorker ends the ledger worker, running the results it posts meanwhile
// so it cannot block on a plane that has stopped.
func (p *Plane) stopWorker() { p.serveUntil(p.worker.stop) }

// serveUntil runs stop on its own goroutine, running the plane's commands
// until it returns: what stop waits for may be waiting for the plane.
func (p *Plane) serveUntil(stop func()) {
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	for {
		select {
		case <-done:
			return
		case fn := <-p.cmds:
			fn()
		}
	}
}

// provision runs a provisioning change, retrying while a shard's queue is
// full (the plane delivers meanwhile) for at most provisionWait. Once the
// node is ready it returns only when the change is in every shard's ring:
// a shard drains its ring before it reads requests, so a request sent
// after the admin API answered — the first use of a new key — sees it.
// (Before ready, at start, nothing is served, and a million accounts load
// without the extra wait each.)
func (p *Plane) provision(f func(m *plane.Machine, now int64) error) error {
	deadline := time.Now().Add(provisionWait)
	for {
		var err error
		var marks []uint64
		ran := p.do(func(m *plane.Machine, now int64) {
			if err = f(m, now); err == nil && p.ready.Load() {
				marks = m.QueuedMarks()
			}
		})
		if !ran {
			return ErrStopped
		}
		if marks != nil {
			return p.awaitDelivery(marks, deadline)
		}
		if !errors.Is(err, plane.ErrBusy) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitDelivery waits until every shard's ring has what was queued up to
// marks (the plane pushes queues at the end of the step that queued
// them: one more command usually finds them delivered), or the deadline.
func (p *Plane) awaitDelivery(marks []uint64, deadline time.Time) error {
	for {
		delivered := false
		if !p.do(func(m *plane.Machine, _ int64) { delivered = m.DeliveredUpTo(marks) }) {
			return ErrStopped
		}
		if delivered {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("control: a change has not reached every shard's ring within %v (a ring stays full)", provisionWait)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// provisionWait bounds how long a provisioning change waits for room in
// the shards' queues (a start-up load of many accounts waits here).
const provisionWait = 10 * time.Second

// Install publishes snap to every shard: a new account, or a newer policy
// or standing.
func (p *Plane) Install(snap *core.Snapshot) error {
	return p.provision(func(m *plane.Machine, now int64) error { return m.Install(snap, now) })
}

// BindKey lets the key with digest d act for account on every shard.
func (p *Plane) BindKey(d credential.Digest, id core.AccountID) error {
	return p.provision(func(m *plane.Machine, _ int64) error { return m.Bind(d, id) })
}

// BindInstalledKey binds a key only to an account the shards hold
// (plane.Machine.BindInstalled); plane.ErrUnknownAccount otherwise.
func (p *Plane) BindInstalledKey(d credential.Digest, id core.AccountID) error {
	return p.provision(func(m *plane.Machine, _ int64) error { return m.BindInstalled(d, id) })
}

// RevokeKey stops the key with digest d on every shard.
func (p *Plane) RevokeKey(d credential.Digest) error {
	return p.provision(func(m *plane.Machine, _ int64) error { return m.Unbind(d) })
}

// BindPlatformToken lets a platform token call the seed-000 routes.
func (p *Plane) BindPlatformToken(d credential.Digest) error {
	return p.provision(func(m *plane.Machine, _ int64) error { return m.BindPlatform(d) })
}

// RevokePlatformToken stops a platform token.
func (p *Plane) RevokePlatformToken(d credential.Digest) error {
	return p.provision(func(m *plane.Machine, _ int64) error { return m.UnbindPlatform(d) })
}

// MarkReady tells every shard its initial state is delivered.
func (p *Plane) MarkReady() error {
	err := p.provision(func(m *plane.Machine, _ int64) error { return m.Ready() })
	if err == nil {
		p.ready.Store(true)
	}
	return err
}

// FundingChanged publishes new evidence for every account of evs, in one
// command (a fleet refreshes whole subtrees at once); an account the
// ledger had refused asks again if its evidence shows more money.
func (p *Plane) FundingChanged(evs map[core.AccountID]core.FundingEvidence, readAt int64) {
	if len(evs) == 0 {
		return
	}
	p.do(func(m *plane.Machine, now int64) {
		for id, ev := range evs {
			m.Evidence(id, ev, readAt, now)
		}
	})
}

// Heard is an announcement from another node of the fleet.
func (p *Plane) Heard(a plane.Announcement) {
	p.do(func(m *plane.Machine, now int64) { m.Heard(a, now) })
}

// HandBackLeases retires every node lease, for shutdown (after the shards
// have ended their reservations): each is released to the ledger once its
// slices are back.
func (p *Plane) HandBackLeases() {
	p.do(func(m *plane.Machine, now int64) { m.HandBackAll(now) })
}

// LeasesReleased reports whether no node lease is held and no ledger call
// is out.
func (p *Plane) LeasesReleased() bool {
	var done bool
	p.do(func(m *plane.Machine, _ int64) { done = m.Quiet() && p.worker.pending() == 0 })
	return done
}

// Idle reports whether nothing waits for or from any shard.
func (p *Plane) Idle() bool {
	idle := true
	p.do(func(m *plane.Machine, _ int64) {
		idle = m.Idle() && p.sh.Backlog() == 0
		for _, l := range p.links {
			if l.Out.Ring().Len() > 0 || l.In.Ring().Len() > 0 {
				idle = false
			}
		}
	})
	return idle
}

// Holding is the units this node holds for id in its leases and slices.
func (p *Plane) Holding(id core.AccountID) core.CostUnits {
	var h core.CostUnits
	p.do(func(m *plane.Machine, _ int64) { h = m.Holding(id) })
	return h
}

// Report is the plane's state for scrapers.
type Report struct {
	plane.Stats
	SpoolBroken bool
	// RingIn and RingOut are each shard's ring depths (plane → shard, and
	// shard → plane); Queued what waits for room in RingIn.
	RingIn, RingOut, Queued []int
	SpoolBacklog            int
}

// Report collects the plane's counters on its goroutine.
func (p *Plane) Report() Report {
	var r Report
	p.do(func(m *plane.Machine, _ int64) {
		r.Stats = m.Stats()
		r.SpoolBroken, r.SpoolBacklog = p.sh.Broken(), p.sh.Backlog()
		for i, l := range p.links {
			r.RingIn = append(r.RingIn, l.In.Ring().Len())
			r.RingOut = append(r.RingOut, l.Out.Ring().Len())
			r.Queued = append(r.Queued, len(m.Queue(i)))
		}
	})
	return r
}
