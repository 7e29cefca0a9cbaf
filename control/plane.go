// Package control runs tollgated's control plane: the shell around its
// state machine (control/plane). One goroutine pops the shards' rings,
// feeds what it finds to the machine, and carries out what the machine
// asks — shard messages into rings, ledger calls on a worker goroutine,
// records into the usage spool, evidence into the cells shards read — then
// sleeps until the machine's next deadline or the next input. The package
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

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/control/durability"
	"github.com/tollgated/tollgated/control/funding"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/control/shares"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/invariant"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

// Link is what joins the plane and one shard: a ring each way and the
// shard's durable mark.
type Link struct {
	In      *ring.Doorbell[shard.Inbound]  // plane → shard
	Out     *ring.Doorbell[shard.Outbound] // shard → plane
	Durable *shard.DurableMark             // plane → shard: its events on disk
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
	// KeyUseFlush batches key-use reports for KeysUsed (5 s).
	KeyUseFlush time.Duration
	// Now reads the clock (tests inject one).
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
	cfg    Config
	links  []Link
	m      *plane.Machine
	worker *ledgerWorker
	cmds   chan func()
	ended  chan struct{} // closed when Run has returned: nothing reads cmds any more
	ready  atomic.Bool   // MarkReady succeeded: provisioning waits for delivery
	kick   chan struct{}

	// backlog holds spool records the spool refused as full, in order.
	// While it is not empty no shard ring is read, so shards fill their
	// rings and shed new billing (accounting-busy): the bound is the
	// records one pass produced.
	backlog  [][]byte
	broken   bool
	lastWork int64
	appended uint64 // the spool sequence of the last record this plane appended

	// popped receives each shard's outbound messages in turn; only the
	// plane's goroutine touches it. (A pool, Get and Put for every shard on
	// every pass, cost about a tenth of the plane's CPU at 64 shards.)
	popped *[256]shard.Outbound
	// marks are the durable marks as last published, per shard.
	marks []uint64

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
	for _, l := range links {
		if l.In == nil || l.Out == nil || l.Durable == nil {
			return nil, errors.New("control: a link needs both rings and a durable mark")
		}
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
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
		ended: make(chan struct{}), popped: new([256]shard.Outbound), marks: make([]uint64, len(links))}
	p.worker = newLedgerWorker(cfg.Store, cfg.Lease.CallTimeout, p.post)
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

// Do runs fn on the plane's goroutine with the machine and waits for it.
// Once the plane has stopped, fn does not run and Do returns at once: a
// publisher racing the node's shutdown (the fleet's followers, the
// provisioner) must not wait forever for a loop that is gone.
func (p *Plane) Do(fn func(m *plane.Machine, now int64)) { p.do(fn) }

// do is Do, reporting whether fn ran.
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

// step is one pass: inputs in, intents out. It reports how much it found.
func (p *Plane) step() int {
	now := p.cfg.Now()
	worked := p.drainCommands()
	if p.retryBacklog() {
		for i := range p.links {
			worked += p.drainShard(i, now)
		}
	}
	p.m.SpoolDurable(p.cfg.Spool.Durable())
	if next := p.m.Next(); next != 0 && now >= next {
		p.m.Tick(now)
		worked++
	}
	worked += p.execute(now)
	p.publish()
	if p.cfg.Syncing != nil {
		p.cfg.Syncing.Set(p.appended > p.cfg.Spool.Durable())
	}
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
	now := p.cfg.Now()
	busy := now-p.lastWork < busyWindow || p.undelivered() || len(p.backlog) > 0
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
	}
}

// undelivered reports whether messages wait for room in a shard's ring.
func (p *Plane) undelivered() bool {
	for i := range p.links {
		if len(p.m.Queue(i)) > 0 {
			return true
		}
	}
	return false
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

func (p *Plane) drainShard(i int, now int64) int {
	buf := p.popped
	k := p.links[i].Out.Ring().PopBatch(buf[:])
	for j := range k {
		p.m.FromShard(i, &buf[j], now)
		buf[j] = shard.Outbound{}
	}
	return k
}

// execute carries out the machine's intents: effects in order, then each
// shard's queue into its ring as far as it has room.
func (p *Plane) execute(now int64) int {
	n := 0
	for i := range p.m.Effects() {
		e := &p.m.Effects()[i]
		n++
		switch e.Kind {
		case plane.EffectCall:
			p.worker.call(e.Call, func(r funding.Result) {
				p.m.LedgerDone(r, p.cfg.Now())
			})
		case plane.EffectAppend:
			for seq, rec := range p.m.Records(e) {
				p.append(seq, rec)
			}
		case plane.EffectPublish:
			if e.Clear {
				e.Cell.Clear()
			} else {
				e.Cell.Store(e.Evidence)
			}
		case plane.EffectIngest:
			in := e.Ingest
			p.worker.ingest(in.Events, p.cfg.Now(), func(res []ledger.IngestResult, err error) {
				p.m.IngestDone(in, res, err)
			})
		case plane.EffectClaim:
			if p.cfg.Claims != nil {
				p.cfg.Claims.Claim(e.Ingest.Events)
			}
		case plane.EffectUnclaim:
			if p.cfg.Claims != nil {
				p.cfg.Claims.Unclaim(e.Ingest.Events)
			}
		case plane.EffectFundingChanged:
			go func(ids []core.AccountID, in *plane.Ingest) {
				if f := p.cfg.FundingChanged; f != nil {
					f(ids) // publishes the new evidence through Do
				}
				p.Do(func(m *plane.Machine, _ int64) { m.Refreshed(in) })
			}(e.Accounts, e.Ingest)
		case plane.EffectKeysUsed:
			if f := p.cfg.KeysUsed; f != nil {
				go f(e.Keys)
			}
		}
	}
	p.m.ClearEffects()
	for i, l := range p.links {
		q := p.m.Queue(i)
		if len(q) == 0 {
			continue
		}
		k := l.In.PushBatch(q)
		p.m.Sent(i, k, now)
		n += k
	}
	for i, mark := range p.m.Marks() {
		if mark != p.marks[i] {
			p.marks[i] = mark
			p.links[i].Durable.Publish(mark)
			p.links[i].In.Notify() // after the store: see shard.DurableMark
			n++
		}
	}
	return n
}

// append writes one record, or keeps it (and every later one) for when the
// spool has room again.
func (p *Plane) append(seq uint64, rec []byte) {
	if p.broken {
		return
	}
	if len(p.backlog) > 0 {
		p.backlog = append(p.backlog, append([]byte(nil), rec...))
		return
	}
	got, err := p.cfg.Spool.Append(rec)
	switch {
	case err == nil:
		p.appended = got
		if got != seq {
			invariant.Violated(invariant.SpoolBroken, fmt.Sprintf("the spool numbered record %d as %d", seq, got))
		}
	case p.cfg.IsFull(err):
		p.backlog = append(p.backlog, append([]byte(nil), rec...))
	default:
		p.broken = true
		invariant.Violated(invariant.SpoolBroken, err.Error())
	}
}

// retryBacklog re-offers records the spool refused; it reports whether the
// backlog is empty (and shard rings may be read again).
func (p *Plane) retryBacklog() bool {
	n := 0
	for n < len(p.backlog) {
		seq, err := p.cfg.Spool.Append(p.backlog[n])
		if err != nil {
			if !p.cfg.IsFull(err) {
				p.broken = true
				invariant.Violated(invariant.SpoolBroken, err.Error())
				p.backlog = nil
				return true
			}
			break
		}
		p.appended = seq
		n++
	}
	p.backlog = p.backlog[n:]
	if len(p.backlog) == 0 {
		p.backlog = nil
	}
	return len(p.backlog) == 0
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
// (a duplicate of its eventfd as a non-blocking *os.File), turning a ring
// into a kick on a channel. A doorbell that cannot be watched leaves that
// shard on the busy beat alone.
func (p *Plane) watchBells() []*os.File {
	var files []*os.File
	for i, l := range p.links {
		fd, err := unix.Dup(l.Out.FD())
		if err != nil {
			continue
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			continue
		}
		f := os.NewFile(uintptr(fd), "doorbell-"+strconv.Itoa(i))
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
func (p *Plane) stopWorker() {
	done := make(chan struct{})
	go func() { p.worker.stop(); close(done) }()
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
func (p *Plane) FundingChanged(evs map[core.AccountID]core.FundingEvidence) {
	if len(evs) == 0 {
		return
	}
	p.Do(func(m *plane.Machine, now int64) {
		for id, ev := range evs {
			m.Evidence(id, ev, now)
		}
	})
}

// HandBackLeases retires every node lease, for shutdown (after the shards
// have ended their reservations): each is released to the ledger once its
// slices are back.
func (p *Plane) HandBackLeases() {
	p.Do(func(m *plane.Machine, now int64) { m.HandBackAll(now) })
}

// LeasesReleased reports whether no node lease is held and no ledger call
// is out.
func (p *Plane) LeasesReleased() bool {
	var done bool
	p.Do(func(m *plane.Machine, _ int64) { done = m.Quiet() && p.worker.pending() == 0 })
	return done
}

// Idle reports whether nothing waits for or from any shard.
func (p *Plane) Idle() bool {
	idle := true
	p.Do(func(m *plane.Machine, _ int64) {
		idle = m.Idle() && len(p.backlog) == 0
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
	p.Do(func(m *plane.Machine, _ int64) { h = m.Holding(id) })
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
	p.Do(func(m *plane.Machine, _ int64) {
		r.Stats = m.Stats()
		r.SpoolBroken, r.SpoolBacklog = p.broken, len(p.backlog)
		for i, l := range p.links {
			r.RingIn = append(r.RingIn, l.In.Ring().Len())
			r.RingOut = append(r.RingOut, l.Out.Ring().Len())
			r.Queued = append(r.Queued, len(m.Queue(i)))
		}
	})
	return r
}
