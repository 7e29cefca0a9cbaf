package pgstore

// Several nodes on one database: each test opens two stores (two pools,
// as two tollgated processes would) and races them, several goroutines
// each, on the same rows. What must hold is what the single-node suite
// checks, plus exactly-once across nodes.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC).UnixNano() // a Tuesday noon

const (
	minute = int64(time.Minute)
	hour   = int64(time.Hour)
	day    = 24 * hour
)

// fleet is n stores on one fresh database.
func fleet(t *testing.T, n int) []*Store {
	t.Helper()
	first, url := openFresh(t, Options{})
	nodes := []*Store{first}
	for range n - 1 {
		s, err := Open(t.Context(), url, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		nodes = append(nodes, s)
	}
	return nodes
}

// race runs fn on every node from perNode goroutines each and waits.
func race(nodes []*Store, perNode int, fn func(s *Store, worker int)) {
	var wg sync.WaitGroup
	for i, s := range nodes {
		for j := range perNode {
			wg.Go(func() { fn(s, i*perNode+j) })
		}
	}
	wg.Wait()
}

func mustCreate(t *testing.T, s *Store, id, parent core.AccountID, unmetered ...bool) {
	t.Helper()
	if _, _, err := s.CreateAccount(t.Context(), ledger.AccountSpec{ID: id, Parent: parent, Unmetered: len(unmetered) > 0 && unmetered[0]}, t0); err != nil {
		t.Fatal(err)
	}
}

func mustDeposit(t *testing.T, s *Store, id core.AccountID, units core.CostUnits) {
	t.Helper()
	if _, _, err := s.Deposit(t.Context(), id, units, fmt.Sprintf("d%d", units), t0); err != nil {
		t.Fatal(err)
	}
}

// sound asserts Check passes and the reconciliation query finds nothing.
func sound(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Check(t.Context()); err != nil {
		t.Fatalf("check: %v", err)
	}
	if found, err := s.Reconcile(t.Context()); err != nil || len(found) > 0 {
		t.Fatalf("reconcile: %v, %v", found, err)
	}
}

func eventID(n uint64) (id [16]byte) {
	binary.BigEndian.PutUint64(id[8:], n)
	id[0] = 0xf1
	return id
}

// TestNodesBillEachEventOnce: two nodes ingest the same events, in
// overlapping batches in different orders, at once: every event is
// Accepted exactly once fleet-wide, and Settled is exactly their units.
func TestNodesBillEachEventOnce(t *testing.T) {
	nodes := fleet(t, 2)
	a := nodes[0]
	mustCreate(t, a, "org", "", false)
	mustCreate(t, a, "agent", "org", false)
	mustDeposit(t, a, "org", 1_000_000)
	mustDeposit(t, a, "agent", 1_000_000)
	l, _, err := a.Acquire(t.Context(), "agent", "node-a", 5000, 5000, hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	const events = 600
	all := make([]ledger.Usage, events)
	for i := range all {
		all[i] = ledger.Usage{ID: eventID(uint64(i)), Account: "agent", Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: 3}
		if i%3 == 0 {
			all[i].Source, all[i].LeaseID, all[i].Token = ledger.UsagePostPaid, 0, 0
		}
	}
	var accepted, duplicate atomic.Int64
	race(nodes, 2, func(s *Store, w int) {
		order := rand.New(rand.NewPCG(uint64(w), 7)).Perm(events)
		for start := 0; start < events; start += 50 {
			batch := make([]ledger.Usage, 0, 50)
			for _, i := range order[start : start+50] {
				batch = append(batch, all[i])
			}
			res, err := s.Ingest(t.Context(), batch, t0)
			if err != nil {
				t.Errorf("node %d: ingest: %v", w, err)
				return
			}
			for _, r := range res {
				switch r {
				case ledger.Accepted:
					accepted.Add(1)
				case ledger.Duplicate:
					duplicate.Add(1)
				default:
					t.Errorf("verdict %d", r)
				}
			}
		}
	})
	if accepted.Load() != events || duplicate.Load() != 3*events {
		t.Fatalf("accepted %d, duplicate %d; want %d and %d", accepted.Load(), duplicate.Load(), events, 3*events)
	}
	acct, err := a.Account(t.Context(), "agent")
	if err != nil || acct.Settled != 3*events {
		t.Fatalf("agent settled %d (%v), want %d", acct.Settled, err, 3*events)
	}
	sound(t, a)
}

// TestNodesReclaimEachLeaseOnce: every node reclaims at once, in small
// passes, until nothing is due: each expired lease is forfeited once.
func TestNodesReclaimEachLeaseOnce(t *testing.T) {
	nodes := fleet(t, 2)
	a := nodes[0]
	mustCreate(t, a, "org", "", false)
	mustDeposit(t, a, "org", 1_000_000)
	const leases = 60
	for i := range leases {
		if _, _, err := a.Acquire(t.Context(), "org", "node-a", 10, 10, minute+int64(i), t0); err != nil {
			t.Fatal(err)
		}
	}
	var reclaimed atomic.Int64
	race(nodes, 3, func(s *Store, w int) {
		for {
			n, err := s.Reclaim(t.Context(), t0+hour, 0, 4)
			if err != nil {
				t.Errorf("reclaim: %v", err)
				return
			}
			if n == 0 {
				return
			}
			reclaimed.Add(int64(n))
		}
	})
	if reclaimed.Load() != leases {
		t.Fatalf("reclaimed %d of %d leases", reclaimed.Load(), leases)
	}
	acct, _ := a.Account(t.Context(), "org")
	if acct.Loss != 10*leases || acct.Outstanding != 0 {
		t.Fatalf("org %+v", acct)
	}
	sound(t, a)
}

// TestNodesRollOverOncePerBoundary: every node runs Rollover at once while
// grants roll the same accounts over lazily: each account receives one
// allowance per boundary.
func TestNodesRollOverOncePerBoundary(t *testing.T) {
	nodes := fleet(t, 2)
	a := nodes[0]
	const accounts, allowance = 24, 50
	ids := make([]core.AccountID, accounts)
	for i := range ids {
		ids[i] = core.AccountID(fmt.Sprintf("acct-%02d", i))
		mustCreate(t, a, ids[i], "", false)
		if _, err := a.SetBudget(t.Context(), ids[i], ledger.Budget{Allowance: allowance, Period: ledger.PeriodDay}, t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, now := range []int64{t0 + day, t0 + 2*day} {
		race(nodes, 3, func(s *Store, w int) {
			if w%2 == 1 { // a granter: rolls over lazily
				for _, id := range ids[w%3:] {
					if _, _, err := s.Acquire(t.Context(), id, "node-a", 1, 1, minute, now); err != nil {
						t.Errorf("acquire: %v", err)
					}
				}
				return
			}
			for {
				n, err := s.Rollover(t.Context(), now, 5)
				if err != nil {
					t.Errorf("rollover: %v", err)
				}
				if n == 0 || err != nil {
					return
				}
			}
		})
	}
	for _, id := range ids {
		acct, err := a.Account(t.Context(), id)
		if err != nil || acct.Deposited != 3*allowance {
			t.Fatalf("%s deposited %d (%v): want one allowance per boundary, %d", id, acct.Deposited, err, 3*allowance)
		}
	}
	sound(t, a)
}

// TestNodesForgetEachIDOnce: every node forgets at once; each id is
// forgotten once and all of them are.
func TestNodesForgetEachIDOnce(t *testing.T) {
	nodes := fleet(t, 2)
	a := nodes[0]
	mustCreate(t, a, "org", "", false)
	mustDeposit(t, a, "org", 1_000_000)
	const events = 500
	batch := make([]ledger.Usage, events)
	for i := range batch {
		batch[i] = ledger.Usage{ID: eventID(uint64(i)), Account: "org", Source: ledger.UsagePostPaid, Units: 1}
	}
	if _, err := a.Ingest(t.Context(), batch, t0); err != nil {
		t.Fatal(err)
	}
	var forgotten atomic.Int64
	race(nodes, 2, func(s *Store, w int) {
		for {
			n, err := s.ForgetEvents(t.Context(), t0+1, 7)
			if err != nil {
				t.Errorf("forget: %v", err)
			}
			if n == 0 || err != nil {
				return
			}
			forgotten.Add(int64(n))
		}
	})
	if forgotten.Load() != events {
		t.Fatalf("forgot %d of %d ids", forgotten.Load(), events)
	}
	sound(t, a)
}

// TestNodesExpireEachKeyOnce: every node expires keys at once, in small
// passes, while keys are rotated: each key is revoked once, by one pass,
// and every change is logged once.
func TestNodesExpireEachKeyOnce(t *testing.T) {
	nodes := fleet(t, 2)
	a := nodes[0]
	mustCreate(t, a, "org", "")
	const keys = 60
	for i := range keys {
		k := ledger.Key{ID: fmt.Sprintf("k%02d", i), Account: "org", Digest: [32]byte{byte(i)}, CreatedAt: t0, ExpiresAt: t0 + int64(i%7)*minute + 1}
		if err := a.AddKey(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	before, err := a.LastChange(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	expired := map[string]int{}
	var rotated atomic.Int64
	race(nodes, 3, func(s *Store, w int) {
		if w == 0 { // rotations race the passes for the keys they lock
			for i := range 10 {
				next := ledger.Key{ID: fmt.Sprintf("r%02d", i), Account: "org", Digest: [32]byte{0xee, byte(i)}, CreatedAt: t0}
				_, err := s.RotateKey(t.Context(), "org", fmt.Sprintf("k%02d", i), next, t0)
				switch {
				case err == nil:
					rotated.Add(1)
				case !errors.Is(err, ledger.ErrConflict): // a key already expired is revoked
					t.Errorf("rotate: %v", err)
				}
			}
		}
		for {
			ks, err := s.ExpireKeys(t.Context(), t0+hour, 4)
			if err != nil {
				t.Errorf("expire: %v", err)
			}
			if len(ks) == 0 || err != nil {
				return
			}
			mu.Lock()
			for _, k := range ks {
				expired[k.ID]++
			}
			mu.Unlock()
		}
	})
	if len(expired) != keys {
		t.Fatalf("expired %d of %d keys", len(expired), keys)
	}
	for id, n := range expired {
		if n != 1 {
			t.Fatalf("key %s expired %d times", id, n)
		}
	}
	live, err := a.Keys(t.Context(), "org")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range live {
		if k.Revoked != (k.ID[0] == 'k') {
			t.Fatalf("after the passes: %+v", k)
		}
	}
	changes, err := a.ChangesAfter(t.Context(), before, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Each expiry is one change; each rotation two (the old key's expiry
	// moved, the new key).
	if want := keys + 2*int(rotated.Load()); len(changes) != want {
		t.Fatalf("%d changes logged, want %d (%d rotations)", len(changes), want, rotated.Load())
	}
	sound(t, a)
}

// TestNodesMixedTrafficStaysConserved: two nodes grant, bill, extend,
// release, reclaim and roll over one hierarchy at once, as a fleet does.
// No call fails except with the answers the rules give (refusals, a lease
// another worker ended, an extension across a budget period), and the
// ledger ends sound.
func TestNodesMixedTrafficStaysConserved(t *testing.T) {
	nodes := fleet(t, 2)
	a := nodes[0]
	mustCreate(t, a, "org", "", false)
	mustCreate(t, a, "ws", "org", true)
	agents := []core.AccountID{"agent-a", "agent-b", "agent-c"}
	for _, id := range agents {
		mustCreate(t, a, id, "ws", false)
		mustDeposit(t, a, id, 5_000)
	}
	mustDeposit(t, a, "org", 12_000)
	if _, err := a.SetBudget(t.Context(), "org", ledger.Budget{Allowance: 2_000, Period: ledger.PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	var next atomic.Uint64
	race(nodes, 3, func(s *Store, w int) {
		rng := rand.New(rand.NewPCG(uint64(w), 11))
		now := t0
		var held []ledger.Lease
		for range 40 {
			now += int64(rng.IntN(int(2 * hour)))
			id := agents[rng.IntN(len(agents))]
			switch op := rng.IntN(6); {
			case op < 2 || len(held) == 0:
				l, _, err := s.Acquire(t.Context(), id, fmt.Sprintf("node-%d", w/3), core.CostUnits(1+rng.IntN(300)), 0, hour, now)
				if _, refused := errors.AsType[*ledger.Refusal](err); err != nil && !refused {
					t.Errorf("acquire: %v", err)
				} else if err == nil {
					held = append(held, l)
				}
			case op == 2:
				l := held[rng.IntN(len(held))]
				events := []ledger.Usage{{ID: eventID(next.Add(1)), Account: l.Account, Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: core.CostUnits(1 + rng.IntN(20))},
					{ID: eventID(next.Add(1)), Account: id, Source: ledger.UsagePostPaid, Units: core.CostUnits(1 + rng.IntN(20))}}
				if _, err := s.Ingest(t.Context(), events, now); err != nil {
					t.Errorf("ingest: %v", err)
				}
			case op == 3:
				l := held[rng.IntN(len(held))]
				_, _, err := s.Extend(t.Context(), l.ID, l.Token, core.CostUnits(rng.IntN(100)), 0, hour, now)
				if err != nil && !errors.Is(err, ledger.ErrLeaseNotActive) && !errors.Is(err, ledger.ErrPeriodEnded) {
					t.Errorf("extend: %v", err)
				}
			case op == 4:
				i := rng.IntN(len(held))
				l := held[i]
				held = append(held[:i], held[i+1:]...)
				if err := s.Release(t.Context(), l.ID, l.Token, 0, now); err != nil && !errors.Is(err, ledger.ErrLeaseNotActive) {
					t.Errorf("release: %v", err)
				}
			default:
				if _, err := s.Reclaim(t.Context(), now, minute, 8); err != nil {
					t.Errorf("reclaim: %v", err)
				}
				if _, err := s.Rollover(t.Context(), now, 8); err != nil {
					t.Errorf("rollover: %v", err)
				}
			}
		}
	})
	sound(t, a)
}

// TestNodesSettleExactlyOnce: three nodes settle their own leases' totals
// against the same accounts at once, each from two workers that race on
// the node's mark with the same batches (a batch replayed after a crash,
// at the worst moment): every batch is applied once, the others are
// duplicates, each node's mark ends at its last batch, and Settled is
// exactly what was applied. Lease and account locks are taken in one
// order, so the nodes never deadlock each other out of the retry bound.
func TestNodesSettleExactlyOnce(t *testing.T) {
	nodes := fleet(t, 3)
	a := nodes[0]
	mustCreate(t, a, "org", "", false)
	agents := []core.AccountID{"agent-a", "agent-b", "agent-c"}
	for _, id := range agents {
		mustCreate(t, a, id, "org", false)
		mustDeposit(t, a, id, 100_000)
	}
	mustDeposit(t, a, "org", 1_000_000)
	const batches = 40
	plans := make([][]ledger.Settlement, len(nodes))
	var want core.CostUnits
	var next uint64
	for n := range nodes {
		holder := fmt.Sprintf("node-%d", n)
		var leases []ledger.Lease
		for _, id := range agents {
			l, _, err := a.Acquire(t.Context(), id, holder, 10_000, 10_000, hour, t0)
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
		rng := rand.New(rand.NewPCG(uint64(n), 3))
		for k := range batches {
			st := ledger.Settlement{Node: holder, From: uint64(k) * 10, To: uint64(k+1) * 10}
			for _, l := range leases {
				units := core.CostUnits(1 + rng.IntN(20))
				st.Leases = append(st.Leases, ledger.LeaseUsage{Account: l.Account, LeaseID: l.ID, Token: l.Token, Units: units})
				next++
				st.History = append(st.History, ledger.Usage{ID: eventID(next), Account: l.Account, Source: ledger.UsageLease,
					LeaseID: l.ID, Token: l.Token, Units: units, OccurredAt: t0})
				want += units
			}
			// Rotate the leases, so that batches lock them in another order
			// than they list them.
			leases = append(leases[1:], leases[0])
			plans[n] = append(plans[n], st)
		}
	}
	var applied, duplicates atomic.Int64
	var accepted atomic.Uint64
	race(nodes, 2, func(s *Store, w int) {
		for _, st := range plans[w/2] {
			r, err := s.Settle(t.Context(), st, t0)
			if err != nil {
				t.Errorf("node %d: settle %d-%d: %v", w/2, st.From, st.To, err)
				return
			}
			if r.Duplicate {
				duplicates.Add(1)
				continue
			}
			applied.Add(1)
			accepted.Add(uint64(r.Accepted))
			if r.Rejected != 0 {
				t.Errorf("node %d: settle %d-%d rejected %d", w/2, st.From, st.To, r.Rejected)
			}
		}
	})
	if n := int64(len(nodes) * batches); applied.Load() != n || duplicates.Load() != n {
		t.Fatalf("applied %d, duplicates %d; want %d of each", applied.Load(), duplicates.Load(), n)
	}
	if core.CostUnits(accepted.Load()) != want {
		t.Fatalf("accepted %d, want %d", accepted.Load(), want)
	}
	org, err := a.Account(t.Context(), "org")
	if err != nil || org.Settled != want {
		t.Fatalf("org settled %d (%v), want %d", org.Settled, err, want)
	}
	for n, s := range nodes {
		if m, err := s.ExportMark(t.Context(), fmt.Sprintf("node-%d", n)); m != batches*10 || err != nil {
			t.Fatalf("node %d: mark %d, %v", n, m, err)
		}
	}
	if u, err := a.UsageOf(t.Context(), "agent-a", 1000); err != nil || len(u) != len(nodes)*batches {
		t.Fatalf("agent-a's history holds %d events (%v), want %d", len(u), err, len(nodes)*batches)
	}
	sound(t, a)
}
