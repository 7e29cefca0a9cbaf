package control

import (
	"errors"
	"math/bits"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// LedgerFunder funds shards from node leases held in the ledger: per
// account, one current lease whose units the plane slices to shards, and
// retired leases waiting for their slices to come back before they are
// released. Every method runs on the plane goroutine and none does I/O:
// ledger calls go to a worker goroutine (ledgerWorker) and their results
// come back to the plane as commands.
//
// Per lease the plane keeps an exact account of its units:
//
//	Granted == pool + out + billed
//
// pool: here, not sliced; out: sliced to shards, not yet billed or
// returned; billed: usage events seen. A lease is quiescent when out == 0,
// and only then released, claiming exactly pool as unspent — so the ledger
// is never told a unit is unspent while a shard could still spend it.
type LedgerFunder struct {
	cfg      LeaseConfig
	worker   *ledgerWorker
	accounts map[core.AccountID]*fundedAccount
	plane    *Plane
	stats    FundingStats
}

// LeaseConfig sets how node leases are taken from the ledger.
type LeaseConfig struct {
	TTL    time.Duration  // a node lease's lifetime (default 60 s)
	Renew  time.Duration  // rotate to a successor when less than this is left (default TTL/2)
	Margin time.Duration  // slices stop being usable this long before expiry (default 2 s)
	Target core.CostUnits // units a node lease asks for (default 1,000,000)
	// Retry is how long after a refusal the funder waits before asking the
	// ledger again on its own; a deposit, budget change or rollover asks at
	// once (default 1 s).
	Retry time.Duration
	// CallTimeout bounds every ledger call (default 5 s).
	CallTimeout time.Duration
}

// FundingStats counts the funder's ledger traffic.
type FundingStats struct {
	Acquired, Consolidated, Released, Refused, Errors uint64
}

type nodeLease struct {
	id, token        uint64
	granted          core.CostUnits
	pool, out, spent core.CostUnits
	grantedAt        int64
	expires          int64
	// gathering: its slices were asked back for a consolidation.
	gathering bool
	// short: the ledger granted less than was asked — the account is near
	// exhaustion, so a successor is asked for only once this lease cannot
	// serve at all, not at low water (which would split a small balance
	// over ever smaller leases).
	short bool
}

type fundedAccount struct {
	id        core.AccountID
	cur       *nodeLease
	retired   []*nodeLease
	tokens    map[uint64]uint64 // fencing token → lease id, for usage records, while the lease is ours
	busy      bool              // a ledger call for this account is in flight
	need      core.CostUnits    // largest quote refused since the last call
	refusedAt int64             // 0: not refused
	lastGrant int64
	ev        ledger.Evidence // the ledger's last word on funding
	hasEv     bool
	// rate is how fast the account drew on its last lease (units/s): the
	// next lease asks for leaseSeconds of it, so a busy account renews a
	// few times a minute instead of on every burst.
	rate core.CostUnits
}

// leaseSeconds is how many seconds of an account's recent draw a node
// lease asks for, at least.
const leaseSeconds = 2

// drawWindow is the shortest life over which a lease's draw is measured.
const drawWindow = int64(100e6)

// maxWant bounds one lease request.
const maxWant = core.CostUnits(1) << 50

// noteDraw records how fast l was drawn on, from its grant until now.
func (fa *fundedAccount) noteDraw(l *nodeLease, now int64) {
	// Slicing happens in bursts right after a grant: judge the draw only
	// over a window long enough to mean something.
	if l == nil || now-l.grantedAt < drawWindow {
		return
	}
	drawn := uint64(l.granted - min(l.pool, l.granted))
	hi, lo := bits.Mul64(drawn, 1e9)
	elapsed := uint64(now - l.grantedAt)
	if hi >= elapsed {
		fa.rate = maxWant
		return
	}
	perSec, _ := bits.Div64(hi, lo, elapsed)
	fa.rate = core.CostUnits(min(perSec, uint64(maxWant)))
}

// NewLedgerFunder returns a funder over store. Start its worker with the
// plane: New does it when handed a LedgerFunder.
func NewLedgerFunder(store ledger.Store, cfg LeaseConfig) *LedgerFunder {
	if cfg.TTL <= 0 {
		cfg.TTL = 60 * time.Second
	}
	if cfg.Renew <= 0 || cfg.Renew >= cfg.TTL {
		cfg.Renew = cfg.TTL / 2
	}
	if cfg.Margin <= 0 || cfg.Margin >= cfg.Renew {
		cfg.Margin = min(2*time.Second, cfg.Renew/4)
	}
	if cfg.Target == 0 {
		cfg.Target = 1_000_000
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	return &LedgerFunder{cfg: cfg, worker: newLedgerWorker(store, cfg.CallTimeout),
		accounts: make(map[core.AccountID]*fundedAccount)}
}

func (f *LedgerFunder) account(id core.AccountID) *fundedAccount {
	fa := f.accounts[id]
	if fa == nil {
		fa = &fundedAccount{id: id, tokens: make(map[uint64]uint64)}
		f.accounts[id] = fa
	}
	return fa
}

// Grant implements Funder: a slice of the current lease, or nothing (and a
// ledger call under way) when it cannot cover the request.
func (f *LedgerFunder) Grant(id core.AccountID, want, need core.CostUnits, now int64) (Grant, error) {
	fa := f.account(id)
	fa.lastGrant = now
	// A quote refused earlier is served first: the starving shard that
	// refused it is funded from the consolidated lease with no need of its
	// own (fundStarving asks for none).
	need = max(need, fa.need)
	l := fa.cur
	if l != nil && need > l.pool && now < l.expires-int64(f.cfg.Renew) {
		// A quote the lease cannot fund: consolidate — gather the lease's
		// slices back, then release and regrant it in one ledger
		// transaction, grown to the quote — rather than take a second
		// lease beside it. settled() schedules it once the lease is
		// quiescent.
		fa.need = need
		switch {
		case l.out == 0:
			f.schedule(fa, now)
		case !l.gathering: // once per lease: every refused refill would otherwise flood the rings
			l.gathering = true
			f.plane.reclaimToken(id, l.token)
		}
		return Grant{Evidence: fa.ev, HasEvidence: fa.hasEv}, nil
	}
	// need > pool reaches here only in the renew window, where the lease
	// is being succeeded anyway: the successor is asked to cover the quote.
	// Granting it from this lease would take more than its pool holds (the
	// pool is unsigned: it would wrap and fund units the ledger never
	// leased — TestAQuoteAboveThePoolNearExpiryGrantsNothing).
	if l == nil || now >= l.expires-int64(f.cfg.Margin) || l.pool == 0 || need > l.pool {
		fa.need = need
		f.schedule(fa, now)
		// With evidence the plane can tell "spoken for by other shards"
		// (reclaim their slices) from "the ledger has no more".
		return Grant{Evidence: fa.ev, HasEvidence: fa.hasEv}, nil
	}
	units := min(want, l.pool)
	if l.short {
		// Near exhaustion this lease is all there is: split it over the
		// shards, so the first to ask does not hold all of it while the
		// others starve and force a gather.
		units = min(units, max(l.granted/core.CostUnits(max(len(f.plane.links), 1)), 1))
	}
	if need > units {
		units = need
	}
	fa.need = 0
	l.pool -= units
	l.out += units
	if (!l.short && l.pool < l.granted/4) || now >= l.expires-int64(f.cfg.Renew) {
		f.schedule(fa, now)
	}
	return Grant{Token: l.token, Units: units, Until: l.expires - int64(f.cfg.Margin)}, nil
}

// Return implements Funder: units of lease token come back from a shard.
func (f *LedgerFunder) Return(id core.AccountID, token uint64, units core.CostUnits) {
	fa := f.accounts[id]
	if fa == nil {
		return
	}
	l := fa.lease(token)
	if l == nil || units > l.out {
		f.stats.Errors++ // a return the plane never sliced: a broken invariant
		return
	}
	l.out -= units
	l.pool += units
	f.settled(fa, l)
}

// Settle implements Funder: a usage event billed units of its lease.
func (f *LedgerFunder) Settle(ev *core.UsageEvent) {
	if ev.Source != core.SourceLease {
		return
	}
	fa := f.accounts[ev.Account()]
	if fa == nil {
		return
	}
	l := fa.lease(ev.FencingToken)
	if l == nil || ev.Units > l.out {
		f.stats.Errors++
		return
	}
	l.out -= ev.Units
	l.spent += ev.Units
	f.settled(fa, l)
}

// settled runs after a lease's out shrank: a retired lease that is now
// quiescent is released; a current one may now be consolidated.
func (f *LedgerFunder) settled(fa *fundedAccount, l *nodeLease) {
	if l.out != 0 {
		return
	}
	if l != fa.cur {
		f.release(fa, l)
		return
	}
	if fa.need > l.pool && !fa.busy {
		fa.refusedAt = 0 // a consolidation may now fund the refused quote
		f.schedule(fa, f.plane.cfg.Now())
	}
}

// LeaseID names the ledger lease behind a fencing token of id.
func (f *LedgerFunder) LeaseID(id core.AccountID, token uint64) uint64 {
	if fa := f.accounts[id]; fa != nil {
		return fa.tokens[token]
	}
	return 0
}

func (fa *fundedAccount) lease(token uint64) *nodeLease {
	if fa.cur != nil && fa.cur.token == token {
		return fa.cur
	}
	for _, l := range fa.retired {
		if l.token == token {
			return l
		}
	}
	return nil
}

// schedule asks the ledger for funding for fa, unless a call is already in
// flight or the ledger refused recently. When the current lease is
// quiescent it is consolidated (released and regranted in one
// transaction, growing to the refused quote); otherwise a successor is
// acquired alongside and the current lease retires.
func (f *LedgerFunder) schedule(fa *fundedAccount, now int64) {
	if fa.busy || (fa.refusedAt != 0 && now-fa.refusedAt < int64(f.cfg.Retry)) {
		return
	}
	fa.busy = true
	fa.noteDraw(fa.cur, now)
	want := min(max(f.cfg.Target, fa.need, leaseSeconds*fa.rate), maxWant)
	job := ledgerJob{account: fa.id, want: want, need: fa.need, ttl: int64(f.cfg.TTL), now: now}
	if l := fa.cur; l != nil && l.out == 0 {
		job.kind, job.lease, job.token, job.unspent = jobConsolidate, l.id, l.token, l.pool
		job.leaseExpires = l.expires
		fa.cur = nil // its pool now belongs to the consolidation
		delete(fa.tokens, l.token)
	} else {
		job.kind = jobAcquire
	}
	f.worker.submit(job, f.done)
}

// release returns a quiescent retired lease to the ledger.
func (f *LedgerFunder) release(fa *fundedAccount, l *nodeLease) {
	for i, r := range fa.retired {
		if r == l {
			fa.retired = append(fa.retired[:i], fa.retired[i+1:]...)
			break
		}
	}
	// Quiescent: no usage of this token can still arrive, so the plane no
	// longer needs its lease id.
	delete(fa.tokens, l.token)
	if l.pool+l.spent != l.granted {
		f.stats.Errors++ // granted == pool + out + billed, and out is 0: a broken invariant
	}
	f.worker.submit(ledgerJob{kind: jobRelease, account: fa.id, lease: l.id, token: l.token,
		unspent: l.pool, now: f.plane.cfg.Now()}, f.done)
}

// done applies a ledger call's result on the plane goroutine.
func (f *LedgerFunder) done(r ledgerResult) {
	fa := f.account(r.job.account)
	if r.job.kind == jobRelease {
		if r.err != nil {
			f.stats.Errors++ // the lease is forfeited at expiry: money stays bounded
			return
		}
		f.stats.Released++
		// Its units are back in the balance: a refused account may be
		// fundable again.
		fa.refusedAt = 0
		f.plane.fundStarving(fa.id)
		return
	}
	fa.busy = false
	now := f.plane.cfg.Now()
	if r.evidence != nil {
		fa.ev, fa.hasEv = *r.evidence, true
		f.plane.publishEvidence(fa.id, *r.evidence)
	}
	var refusal *ledger.Refusal
	switch {
	case errors.As(r.err, &refusal):
		f.stats.Refused++
		fa.refusedAt, fa.need = now, 0
		if r.job.kind == jobConsolidate && r.released {
			f.stats.Released++
		}
		return
	case r.err != nil:
		f.stats.Errors++
		fa.refusedAt = now // back off as after a refusal
		if r.job.kind == jobConsolidate && !r.released {
			// Nothing happened in the ledger: the lease is still ours.
			fa.cur = &nodeLease{id: r.job.lease, token: r.job.token, granted: r.job.unspent, pool: r.job.unspent,
				expires: r.job.leaseExpires}
			fa.tokens[r.job.token] = r.job.lease
		}
		return
	}
	if r.job.kind == jobConsolidate {
		f.stats.Consolidated++
	} else {
		f.stats.Acquired++
	}
	fa.refusedAt = 0
	if r.lease.Granted < r.job.need {
		// The ledger cannot fund the refused quote: stop insisting on it
		// (which would starve every smaller request); the evidence now
		// answers that quote balance-insufficient.
		fa.need = 0
	}
	nl := &nodeLease{id: r.lease.ID, token: r.lease.Token, granted: r.lease.Granted, pool: r.lease.Granted,
		grantedAt: now, expires: r.lease.ExpiresAt, short: r.lease.Granted < r.job.want}
	fa.tokens[nl.token] = nl.id
	old := fa.cur
	fa.cur = nl
	if old != nil {
		fa.retired = append(fa.retired, old)
		f.plane.rotated(fa.id, old.token, true)
		if old.out == 0 {
			f.release(fa, old)
		}
	}
	f.plane.fundStarving(fa.id)
}

// Tick rotates leases near expiry, retires idle ones, and asks shards again
// for the slices of retired leases that have not all come back.
func (f *LedgerFunder) Tick(now int64) {
	for _, fa := range f.accounts {
		if l := fa.cur; l != nil && now >= l.expires-int64(f.cfg.Renew) {
			if now-fa.lastGrant < int64(f.cfg.Renew) {
				f.schedule(fa, now)
			} else { // idle: hand it back without a successor
				fa.cur = nil
				fa.retired = append(fa.retired, l)
				f.plane.rotated(fa.id, l.token, false)
				if l.out == 0 {
					f.release(fa, l)
				}
			}
		}
		for _, l := range fa.retired {
			f.plane.reclaimToken(fa.id, l.token)
		}
		if fa.refusedAt != 0 && now-fa.refusedAt >= int64(f.cfg.Retry) && fa.need > 0 {
			f.schedule(fa, now)
		}
	}
}

// Refresh forgets a refusal of id, so its next request asks the ledger
// again: its funding may have changed (a deposit, a budget, a rollover).
func (f *LedgerFunder) Refresh(id core.AccountID) {
	if fa := f.accounts[id]; fa != nil {
		fa.refusedAt = 0
	}
}

// ReleaseAll retires every current lease, for shutdown: once the shards
// have handed back their slices, each is released.
func (f *LedgerFunder) ReleaseAll() {
	for _, fa := range f.accounts {
		if l := fa.cur; l != nil {
			fa.cur = nil
			fa.retired = append(fa.retired, l)
			if l.out == 0 {
				f.release(fa, l)
			}
		}
	}
}

// Outstanding reports units still sliced to shards from any lease, and
// whether ledger calls are still in flight.
func (f *LedgerFunder) Outstanding() (out core.CostUnits, leases int, pending int) {
	for _, fa := range f.accounts {
		if fa.cur != nil {
			leases++
			out += fa.cur.out
		}
		for _, l := range fa.retired {
			leases++
			out += l.out
		}
	}
	return out, leases, f.worker.pending()
}

// Stats returns the funder's counters (plane goroutine).
func (f *LedgerFunder) Stats() FundingStats { return f.stats }

func (f *LedgerFunder) start(p *Plane) { f.plane = p; f.worker.start(p.post) }
func (f *LedgerFunder) stop()          { f.worker.stop() }
