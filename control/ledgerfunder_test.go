package control

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

// memSpool is an in-memory Spool whose appends are durable at once.
type memSpool struct {
	mu       sync.Mutex
	recs     [][]byte
	released uint64
}

func (m *memSpool) Append(p []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, append([]byte(nil), p...))
	return uint64(len(m.recs)), nil
}

func (m *memSpool) Durable() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return uint64(len(m.recs))
}

func (m *memSpool) Read(after uint64, limit int, fn func(uint64, []byte) error) (uint64, error) {
	m.mu.Lock()
	recs := m.recs
	m.mu.Unlock()
	last := after
	for i := after; i < uint64(len(recs)) && int(i-after) < limit; i++ {
		if err := fn(i+1, recs[i]); err != nil {
			return last, err
		}
		last = i + 1
	}
	return last, nil
}

func (m *memSpool) Release(upTo uint64) error {
	m.mu.Lock()
	m.released = max(m.released, upTo)
	m.mu.Unlock()
	return nil
}

// ledgerNode is a plane over n shards funded from a bolt ledger, with
// usage spooled in memory and exported by an Exporter.
type ledgerNode struct {
	*node
	store    *boltstore.Store
	funder   *LedgerFunder
	spool    *memSpool
	exporter *Exporter
}

func newLedgerNode(t *testing.T, n int, lc LeaseConfig) *ledgerNode {
	t.Helper()
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln := &ledgerNode{node: &node{}, store: store, funder: NewLedgerFunder(store, lc), spool: &memSpool{}}
	ln.exporter = NewExporter(ln.spool, store, 256)
	startNode(t, ln.node, n, Config{Spool: ln.spool}, ln.funder, nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); ln.exporter.Run(stop, 20*time.Millisecond) }() // as the daemon does
	t.Cleanup(func() { close(stop); <-done; store.Close() })
	return ln
}

// open creates account id with units and one price-1 operation, and binds
// key to it, through the ledger and a Provisioner, as the daemon does.
func (ln *ledgerNode) open(id core.AccountID, key string, units core.CostUnits) *Provisioner {
	ln.t.Helper()
	ctx := context.Background()
	now := time.Now().UnixNano()
	if _, _, err := ln.store.CreateAccount(ctx, ledger.AccountSpec{ID: id}, now); err != nil {
		ln.t.Fatal(err)
	}
	if _, err := ln.store.SetPolicy(ctx, id, []byte(`{"permissions":["chat"],"operations":{"requests":{"weight":1}},"limits":{"max_items":100000}}`)); err != nil {
		ln.t.Fatal(err)
	}
	if units > 0 {
		if _, _, err := ln.store.Deposit(ctx, id, units, "initial", now); err != nil {
			ln.t.Fatal(err)
		}
	}
	h, _ := credential.NewHasher(secret)
	d, _ := h.Digest([]byte(key))
	if err := ln.store.AddKey(ctx, ledger.Key{ID: "k-" + string(id), Account: id, Digest: d, CreatedAt: now}); err != nil {
		ln.t.Fatal(err)
	}
	prov := NewProvisioner(ln.plane, ln.store)
	if _, _, err := prov.Load(ctx); err != nil {
		ln.t.Fatal(err)
	}
	ln.plane.MarkReady()
	return prov
}

// spend sends checks on shard i until a 402 (or the deadline), and returns
// how many were admitted and the last answer.
func (ln *ledgerNode) spend(shards []int, key string, within time.Duration) (admitted int, last int, body []byte) {
	deadline := time.Now().Add(within)
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := false
	for _, i := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				st, b := ln.check(i, key, 1)
				mu.Lock()
				if st == 200 {
					admitted++
				}
				if st == 402 {
					last, body, done = st, b, true
				}
				stop := done
				mu.Unlock()
				if stop {
					return
				}
				if st != 200 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	return admitted, last, body
}

// TestLedgerFundsEveryUnitAndThenAnswers402: with the whole balance spread
// over node leases and shard slices, every unit can be spent — none is
// stranded in a retired lease or an idle shard — then the shards answer
// 402 balance-exhausted, and the ledger bills exactly what was admitted.
func TestLedgerFundsEveryUnitAndThenAnswers402(t *testing.T) {
	ln := newLedgerNode(t, 2, LeaseConfig{TTL: time.Minute, Target: 4000})
	ln.open("acme", "key-acme", 25_000)
	admitted, last, body := ln.spend([]int{0, 1}, "key-acme", 20*time.Second)
	if last != 402 || !bytes.Contains(body, []byte("balance-exhausted")) {
		ln.plane.Do(func() {
			for id, fa := range ln.funder.accounts {
				t.Logf("%s: cur %+v retired %d need %d refusedAt %d busy %v ev %+v funder %+v plane %+v", id, fa.cur, len(fa.retired), fa.need, fa.refusedAt, fa.busy, fa.ev, ln.funder.stats, ln.plane.stats)
				for _, r := range fa.retired {
					t.Logf("  retired %+v", *r)
				}
			}
		})
		for i := range ln.shards {
			st, b := ln.check(i, "key-acme", 1)
			ln.mu[i].Lock()
			l, _ := ln.shards[i].Engine().Lease("acme")
			t.Logf("shard %d: %d %s lease %+v", i, st, b, l.Balance())
			ln.mu[i].Unlock()
		}
		acct, _ := ln.store.Account(context.Background(), "acme")
		t.Logf("ledger: %+v", acct)
		t.Fatalf("after %d admitted: last answer %d %s", admitted, last, body)
	}
	if admitted != 25_000 {
		t.Fatalf("admitted %d of a balance of 25000", admitted)
	}
	if err := ln.exporter.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	acct, _ := ln.store.Account(context.Background(), "acme")
	if acct.Settled != 25_000 || acct.Loss != 0 {
		t.Fatalf("ledger: settled %d loss %d", acct.Settled, acct.Loss)
	}
	ln.plane.Do(func() {
		fa := ln.funder.accounts["acme"]
		held := len(fa.retired)
		if fa.cur != nil {
			held++
		}
		if ln.funder.stats.Errors != 0 {
			t.Errorf("funder counted %d broken invariants", ln.funder.stats.Errors)
		}
		t.Logf("funder: %+v", ln.funder.stats)
		if len(fa.tokens) > held {
			t.Errorf("the plane remembers %d lease tokens for %d leases it holds", len(fa.tokens), held)
		}
	})
	if err := ln.store.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSuspensionReachesEveryShardWithin100ms: a status change published
// through the Provisioner (as the admin API does) is pushed to the shards:
// every shard refuses the account's next request within 100 ms, and a
// reactivation admits again as fast.
func TestSuspensionReachesEveryShardWithin100ms(t *testing.T) {
	ln := newLedgerNode(t, 3, LeaseConfig{TTL: time.Minute})
	prov := ln.open("acme", "key-acme", 1_000_000)
	for i := range ln.shards {
		waitStatus(t, ln, i, 200, 5*time.Second)
	}
	for _, st := range []struct {
		status core.Status
		want   int
	}{{core.StatusSuspended, 403}, {core.StatusActive, 200}} {
		acct, err := ln.store.SetStatus(context.Background(), "acme", st.status)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := prov.AccountChanged(acct); err != nil {
			t.Fatal(err)
		}
		for i := range ln.shards {
			waitStatus(t, ln, i, st.want, 100*time.Millisecond-time.Since(start))
		}
		t.Logf("status %v on all shards %v after the ledger change", st.status, time.Since(start))
	}
}

func waitStatus(t *testing.T, ln *ledgerNode, shard, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, body := ln.check(shard, "key-acme", 1)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard %d: %d %s, want %d within %v", shard, st, body, want, within)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// TestRefusedQuoteConsolidatesTheLease: a quote larger than the node lease
// leads to consolidation — the lease's slices come back, and it is
// released and regranted, grown to the quote, in one ledger transaction —
// not to a second lease beside it.
func TestRefusedQuoteConsolidatesTheLease(t *testing.T) {
	ln := newLedgerNode(t, 2, LeaseConfig{TTL: time.Minute, Target: 1000})
	ln.open("acme", "key-acme", 1_000_000)
	waitStatus(t, ln, 0, 200, 5*time.Second)
	big := func() (int, []byte) { return ln.check(0, "key-acme", 50_000) }
	deadline := time.Now().Add(5 * time.Second)
	st, body := big()
	for st != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("a 50,000-unit quote never funded: %d %s", st, body)
		}
		time.Sleep(time.Millisecond)
		st, body = big()
	}
	var fs FundingStats
	ln.plane.Do(func() { fs = ln.funder.Stats() })
	if fs.Consolidated == 0 {
		t.Fatalf("funded without consolidating: %+v", fs)
	}
	active, err := ln.store.Leases(context.Background(), true)
	grown := false
	for _, l := range active {
		grown = grown || l.Granted >= 50_000
	}
	if err != nil || !grown {
		t.Fatalf("active leases %+v (%v): want one grown to the quote", active, err)
	}
	if err := ln.store.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAnUnfundableQuoteDoesNotStarveSmallOnes: a quote larger than the
// whole balance is refused 402 balance-insufficient, and requests that fit
// keep being admitted.
func TestAnUnfundableQuoteDoesNotStarveSmallOnes(t *testing.T) {
	ln := newLedgerNode(t, 2, LeaseConfig{TTL: time.Minute, Target: 1000})
	ln.open("acme", "key-acme", 20_000)
	waitStatus(t, ln, 0, 200, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, body := ln.check(0, "key-acme", 50_000)
		if st == 402 && bytes.Contains(body, []byte("balance-insufficient")) {
			break
		}
		if st == 200 || time.Now().After(deadline) {
			t.Fatalf("a quote above the balance: %d %s", st, body)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range ln.shards {
		waitStatus(t, ln, i, 200, 2*time.Second)
	}
}

// TestAnIdleAccountDoesNotChurnLeases: an account whose whole balance fits
// in one node lease, funded after a first refusal (its policy came before
// its deposit, as the admin API allows), serves a request and then sits
// idle. The plane must not keep acquiring and releasing leases for it: each
// is a ledger transaction with an fsync.
func TestAnIdleAccountDoesNotChurnLeases(t *testing.T) {
	ln := newLedgerNode(t, 2, LeaseConfig{TTL: time.Minute})
	prov := ln.open("acme", "key-acme", 0) // prefunding is refused: nothing to lease
	ctx := context.Background()
	if _, _, err := ln.store.Deposit(ctx, "acme", 1000, "later", time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	acct, _ := ln.store.Account(ctx, "acme")
	if err := prov.AccountChanged(acct); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	for {
		if st, _ := ln.check(0, "key-acme", 1); st == 200 {
			t.Logf("admitted %v after the deposit", time.Since(start).Round(time.Microsecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never admitted after the deposit")
		}
		time.Sleep(time.Millisecond)
	}
	stats := func() (s FundingStats) {
		ln.plane.Do(func() { s = ln.funder.stats })
		return s
	}
	time.Sleep(200 * time.Millisecond)
	before := stats()
	time.Sleep(500 * time.Millisecond)
	after := stats()
	t.Logf("idle for 500 ms: %+v (from %+v)", after, before)
	if n := after.Acquired + after.Consolidated - before.Acquired - before.Consolidated; n > 1 {
		t.Fatalf("an idle account took %d leases in 500 ms (released %d)", n, after.Released-before.Released)
	}
}

// TestAQuoteAboveThePoolNearExpiryGrantsNothing: in a lease's renew window
// a refill whose quote exceeds the lease's pool gets no units from it (a
// successor is asked for instead); the pool never goes below zero.
func TestAQuoteAboveThePoolNearExpiryGrantsNothing(t *testing.T) {
	ln := newLedgerNode(t, 2, LeaseConfig{TTL: time.Minute})
	ln.open("acme", "key-acme", 100_000)
	deadline := time.Now().Add(5 * time.Second)
	for { // let the prefunding call finish: no ledger call may be in flight
		busy := true
		ln.plane.Do(func() { busy = ln.funder.account("acme").busy })
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("prefunding never finished")
		}
		time.Sleep(time.Millisecond)
	}
	ln.plane.Do(func() {
		f := ln.funder
		now := ln.plane.cfg.Now()
		fa := f.account("acme")
		fa.cur = &nodeLease{id: 999, token: 999, granted: 1000, pool: 10, out: 990,
			expires: now + int64(f.cfg.Renew) - int64(time.Second)}
		g, err := f.Grant("acme", 100, 500, now)
		if err != nil || g.Units != 0 {
			t.Errorf("grant of a 500 quote from a pool of 10: %+v, %v", g, err)
		}
		if l := fa.cur; l != nil && l.token == 999 && (l.pool != 10 || l.out != 990) {
			t.Errorf("lease after the refusal: pool %d, out %d", l.pool, l.out)
		}
		fa.cur = nil // not a real lease: keep it out of the rest of the run
	})
}

// TestAnIdleAccountsLeaseIsHandedBack: after one request, an account that
// sees no more traffic stops renewing its node lease: within a few
// lifetimes it holds none, and the plane stops taking new ones for it.
func TestAnIdleAccountsLeaseIsHandedBack(t *testing.T) {
	ln := newLedgerNode(t, 2, LeaseConfig{TTL: 300 * time.Millisecond})
	ln.open("acme", "key-acme", 100_000)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if st, _ := ln.check(0, "key-acme", 1); st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never admitted")
		}
		time.Sleep(time.Millisecond)
	}
	stats := func() (s FundingStats, holds bool) {
		ln.plane.Do(func() { s, holds = ln.funder.stats, ln.funder.accounts["acme"].cur != nil })
		return s, holds
	}
	time.Sleep(1500 * time.Millisecond) // five lifetimes
	before, _ := stats()
	time.Sleep(600 * time.Millisecond) // two more
	after, holds := stats()
	t.Logf("after 1.5 s idle: %+v; 0.6 s later: %+v, holding a lease: %v", before, after, holds)
	if after.Acquired+after.Consolidated != before.Acquired+before.Consolidated || holds {
		t.Fatalf("an idle account keeps renewing its lease")
	}
}
