// Package control is tollgated's control plane: one goroutine that feeds
// shards their state (snapshots, keys, lease funding, shares of rate and
// concurrency limits) and consumes what they send back (usage, refill
// requests, forwarded reservation operations), only through SPSC rings.
// It never blocks a shard: a message that finds a shard's inbox full waits
// in a backlog here.
package control

import (
	"errors"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ring"
	"github.com/tollgated/tollgated/shard"
)

// Link is the pair of rings between the plane and one shard.
type Link struct {
	In  *ring.Doorbell[shard.Inbound]  // plane → shard
	Out *ring.Doorbell[shard.Outbound] // shard → plane
}

// Config sets the plane's policy.
type Config struct {
	// Slice is the smallest number of units a refill asks the funder for;
	// MaxSlice the largest. Between them a shard's slice adapts to its
	// spending: doubled when it comes back within SliceFast, halved when it
	// took longer than SliceSlow, so a busy shard refills a few times a
	// second and an idle one holds little.
	Slice, MaxSlice      core.CostUnits
	SliceFast, SliceSlow time.Duration
	// StarveWindow is how recently a shard must have run out of its share
	// to count as busy when shares are rebalanced.
	StarveWindow time.Duration
	// IdleFloorPercent of each limit is spread over idle shards, so the
	// first request on an idle shard is not refused; the busy shards share
	// the rest.
	IdleFloorPercent uint32
	// Now reads the clock (tests inject one).
	Now func() int64
	// Spool, when set, makes billed usage durable: each shard is told which
	// of its events are on disk, and releases the answers reporting them.
	Spool Spool
	// UsageChanged, if set, hears (on its own goroutine) of accounts whose
	// balances post-paid usage moved.
	UsageChanged func(ids []core.AccountID)
	// Claims, shared with the Exporter, keeps it from billing post-paid
	// events the plane is billing itself.
	Claims *PostPaidClaims
}

// Plane is the control plane. Its exported methods other than Run are safe
// to call from any goroutine: they queue work for the plane's goroutine.
type Plane struct {
	cfg      Config
	links    []Link
	funder   Funder
	usage    UsageSink
	cmds     chan func()
	accounts map[core.AccountID]*account
	backlog  [][]shard.Inbound
	popBuf   []shard.Outbound
	stats    Stats
	kick     chan struct{}

	durable    *durability   // nil without a spool
	ledger     *LedgerFunder // nil unless funded by the ledger
	leaseNames leaseNamer
	lastTick   int64
	lastWork   int64 // when an iteration last found work: the beat is short after
}

// Stats counts what the plane did.
type Stats struct {
	Usage, Refills, Grants, Forwards, Rebalances, Backlogged uint64
	GrantErrors                                              uint64
}

// New returns a plane over links, funded by funder, billing to usage.
func New(cfg Config, links []Link, funder Funder, usage UsageSink) (*Plane, error) {
	if len(links) == 0 || len(links) > 1<<15 {
		return nil, errors.New("control: need 1 to 32768 shards")
	}
	if cfg.Slice == 0 {
		cfg.Slice = 10_000
	}
	if cfg.MaxSlice < cfg.Slice {
		cfg.MaxSlice = max(cfg.Slice, 1<<32)
	}
	if cfg.SliceFast == 0 {
		cfg.SliceFast = 250 * time.Millisecond
	}
	if cfg.SliceSlow == 0 {
		cfg.SliceSlow = 2 * time.Second
	}
	if cfg.StarveWindow == 0 {
		cfg.StarveWindow = 250 * time.Millisecond
	}
	if cfg.IdleFloorPercent == 0 {
		cfg.IdleFloorPercent = 2
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	p := &Plane{
		cfg: cfg, links: links, funder: funder, usage: usage,
		cmds:     make(chan func(), 1024),
		accounts: make(map[core.AccountID]*account),
		backlog:  make([][]shard.Inbound, len(links)),
		popBuf:   make([]shard.Outbound, 256),
		kick:     make(chan struct{}, 1),
	}
	if cfg.Spool != nil {
		p.durable = newDurability(cfg.Spool, len(links))
	}
	p.leaseNames, _ = funder.(leaseNamer)
	if lf, ok := funder.(*LedgerFunder); ok {
		p.ledger = lf
		lf.start(p)
	}
	return p, nil
}

// stopLedger ends the ledger worker, running the commands it posts
// meanwhile so it cannot block on a plane that has stopped.
func (p *Plane) stopLedger() {
	if p.ledger == nil {
		return
	}
	done := make(chan struct{})
	go func() { p.ledger.stop(); close(done) }()
	for {
		select {
		case <-done:
			return
		case fn := <-p.cmds:
			fn()
		}
	}
}

// post queues fn for the plane's goroutine without waiting for it.
func (p *Plane) post(fn func()) { p.cmds <- fn }

// Kick wakes the plane now (the spool calls it when usage becomes durable).
func (p *Plane) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// tickInterval is how often the plane runs its housekeeping (lease
// rotation, retired lease reclaims).
const tickInterval = int64(100e6)

// housekeeping runs the per-iteration and periodic work that is not
// driven by a message.
func (p *Plane) housekeeping() int {
	worked := 0
	if p.durable != nil {
		worked += p.durable.poll(p.send)
	}
	if p.ledger != nil {
		if now := p.cfg.Now(); now-p.lastTick >= tickInterval {
			p.lastTick = now
			p.ledger.Tick(now)
		}
	}
	return worked
}

// Do runs fn on the plane's goroutine and waits for it.
func (p *Plane) Do(fn func()) {
	done := make(chan struct{})
	p.cmds <- func() { fn(); close(done) }
	<-done
}

// Run is the plane's loop; it returns when stop is closed.
func (p *Plane) Run(stop <-chan struct{}) {
	bells := p.watchBells()
	defer p.stopLedger()
	defer func() {
		for _, f := range bells {
			f.Close()
		}
	}()
	beat := time.NewTimer(pollInterval)
	defer beat.Stop()
	for {
		select {
		case <-stop:
			return
		default:
		}
		worked := p.drainCommands()
		for i := range p.links {
			worked += p.drainShard(i)
		}
		worked += p.housekeeping()
		p.flushBacklog()
		if worked > 0 {
			p.lastWork = p.cfg.Now()
		} else {
			p.sleep(stop, beat)
		}
	}
}

// sleep parks the plane until a shard rings (only urgent messages and a
// filling ring ring), a command arrives, or the beat passes: routine shard
// traffic is picked up on the beat, which bounds its latency without a
// wake-up per message. The plane parks as a goroutine (a channel, a timer,
// doorbells read through Go's netpoller), never in a blocking system call
// of its own: a thread blocked in poll(2) kept the Go scheduler's monitor
// waking every 20 µs, on the CPUs the shards need (half the throughput of
// a one-CPU node, measured with strace and loadtest).
func (p *Plane) sleep(stop <-chan struct{}, beat *time.Timer) {
	asleep := 0
	for _, l := range p.links {
		if !l.Out.BeginSleep() {
			break
		}
		asleep++
	}
	if asleep == len(p.links) {
		beat.Reset(p.beatInterval())
		select {
		case <-stop:
		case <-p.kick:
		case fn := <-p.cmds:
			fn()
		case <-beat.C:
		}
	}
	for _, l := range p.links[:asleep] {
		l.Out.EndSleep()
	}
}

// watchBells reads every shard's outbound doorbell through Go's netpoller
// (a duplicate of its eventfd as a non-blocking *os.File), turning a ring
// into a kick on a channel. A doorbell that cannot be watched leaves that
// shard on the beat alone.
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
				select {
				case p.kick <- struct{}{}:
				default:
				}
			}
		}()
	}
	return files
}

// pollInterval is how often an idle plane looks at its rings anyway;
// busyPollInterval how often it looks while traffic flows (it found work
// within busyWindow). Routine shard traffic — usage events, refill
// requests — rings no doorbell and waits for the beat, and an answer held
// for durability waits for its event to reach the spool: with the 2 ms beat
// under load, durable /v1/check throughput at 64 connections was 15.5–17.3k/s,
// with 250 µs 21.2–23.1k/s (side by side, BENCHMARKS.md). Idle, the long
// beat keeps the plane from waking 4,000 times a second for nothing.
const (
	pollInterval     = 2 * time.Millisecond
	busyPollInterval = 250 * time.Microsecond
	busyWindow       = int64(50e6)
)

func (p *Plane) beatInterval() time.Duration {
	if p.cfg.Now()-p.lastWork < busyWindow {
		return busyPollInterval
	}
	return pollInterval
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

// send queues m for shard i, keeping order behind anything backlogged.
func (p *Plane) send(i int, m shard.Inbound) {
	if len(p.backlog[i]) == 0 && p.links[i].In.Push(m) {
		return
	}
	p.stats.Backlogged++
	p.backlog[i] = append(p.backlog[i], m)
}

func (p *Plane) broadcast(m shard.Inbound) {
	for i := range p.links {
		p.send(i, m)
	}
}

func (p *Plane) flushBacklog() {
	for i, q := range p.backlog {
		n := 0
		for n < len(q) && p.links[i].In.Push(q[n]) {
			n++
		}
		if n > 0 {
			clear(q[:n])
			p.backlog[i] = append(q[:0], q[n:]...)
		}
	}
}

func (p *Plane) drainShard(i int) int {
	k := p.links[i].Out.Ring().PopBatch(p.popBuf)
	for j := range k {
		p.handle(i, &p.popBuf[j])
		p.popBuf[j] = shard.Outbound{}
	}
	return k
}

func (p *Plane) handle(from int, m *shard.Outbound) {
	switch m.Kind {
	case shard.OutUsage:
		p.stats.Usage++
		if p.usage != nil {
			p.usage.Record(&m.Usage)
		}
		if p.durable != nil {
			var lease uint64
			if p.leaseNames != nil && m.Usage.Source == core.SourceLease {
				lease = p.leaseNames.LeaseID(m.Usage.Account(), m.Usage.FencingToken)
			}
			u := ledgerUsage(&m.Usage, lease)
			p.durable.append(from, m.Seq, &u)
		}
		p.funder.Settle(&m.Usage)
	case shard.OutRefill:
		p.refill(from, m)
	case shard.OutReturn:
		if m.Units > 0 {
			p.funder.Return(m.Account, m.Token, m.Units)
		}
		p.fundStarving(m.Account)
	case shard.OutForward:
		p.stats.Forwards++
		if int(m.To) >= len(p.links) {
			p.send(from, shard.Inbound{Kind: shard.InReply, Op: m.Op, Ticket: m.Ticket, Status: shard.ReplyUnknownReservation})
			return
		}
		p.send(int(m.To), shard.Inbound{Kind: shard.InForward, Op: m.Op, From: m.From, Res: m.Res,
			Units: m.Units, Principal: m.Principal, Ticket: m.Ticket})
	case shard.OutReply:
		reply := shard.Inbound{Kind: shard.InReply, Op: m.Op, Ticket: m.Ticket, Status: m.Status,
			Reason: m.Reason, Units: m.Units}
		if p.durable != nil && m.Op == shard.OpFinish {
			// The finish billed usage on the owner: its answer waits, like a
			// local one, until that usage is durable.
			if waiting, at := p.durable.waiting(from); waiting {
				p.durable.hold(at, from, int(m.To), reply)
				return
			}
		}
		p.send(int(m.To), reply)
	case shard.OutStarved:
		p.starved(from, m.Account)
	case shard.OutShareAck:
		p.shareAck(from, m)
	case shard.OutPostPaid:
		p.postPaid(from, m)
	}
}

// Idle reports whether the plane has nothing queued for any shard and no
// shard has anything queued for it.
func (p *Plane) Idle() bool {
	idle := true
	p.Do(func() {
		for i, l := range p.links {
			if len(p.backlog[i]) > 0 || l.Out.Ring().Len() > 0 || l.In.Ring().Len() > 0 {
				idle = false
			}
		}
	})
	return idle
}
