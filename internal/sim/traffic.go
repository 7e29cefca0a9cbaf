package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/shard"
)

const (
	shardStorageOK   = shard.StorageOK
	shardStorageFull = shard.StorageFull
)

// account is a simulated account and what its clients were told.
type account struct {
	id     core.AccountID
	parent core.AccountID
	root   core.AccountID
	key    string
	keyID  string
	weight core.CostUnits // units per "requests" item
	hot    bool
	// deposited is what was deposited into it (a root's top-ups).
	deposited core.CostUnits
	// acked: units clients were told were billed (a check's or finish's
	// 200). maybe: units that may or may not be billed (answers lost in
	// a crash, commits whose finish was not acknowledged, acknowledged
	// usage whose spool records a damaged disk lost before export).
	acked, maybe core.CostUnits
	// lost: data-plane usage whose spool records a damaged disk or a
	// lost volume took before export, with no commit entry left to bill
	// its quote: never billed, acknowledged or not (docs/FLEET.md,
	// docs/RUNBOOK.md), so not owed of what was acked. Which of it was
	// acknowledged the simulator cannot tell (a finish's answer does not
	// name its event), so all of it counts. A post-paid report's 200
	// comes after it is billed: losing its record loses nothing.
	lost core.CostUnits
	live []*reservation
}

type reservation struct {
	id        string
	node      *node
	quote     core.CostUnits
	committed bool // the commit was acknowledged
	finishing bool // a finish was sent and not answered
}

// pending is a client request waiting for its answer.
type pending struct {
	r    *request
	node *node
	done func(status int, body map[string]any)
	lost func() // the node died before answering
}

// client sends one random request to a random node.
func (w *World) client() {
	live := w.live()
	if len(live) == 0 {
		return
	}
	n := live[w.rng.IntN(len(live))]
	a := w.pickAccount()
	t := n.transports[w.rng.IntN(len(n.transports))]
	w.stats.Requests++
	p := w.rng.IntN(10)
	if len(a.live) == 0 && p >= 8 {
		p = 0
	}
	if w.rng.IntN(25) == 0 {
		w.report(n, a, t)
		return
	}
	switch {
	case p < 4:
		k := 1 + w.rng.IntN(4)
		units := core.CostUnits(k) * a.weight
		body := `{"workload":[{"op":"requests","count":` + strconv.Itoa(k) + `}]}`
		w.await(n, t.serve("POST", "/v1/check", a.key, body, w.now), func(st int, m map[string]any) {
			if st == 200 {
				a.acked += units
			}
		}, func() { a.maybe += units })
	case p < 8:
		k := 1 + w.rng.IntN(4)
		body := `{"workload":[{"op":"requests","count":` + strconv.Itoa(k) + `}],"ttl_ms":` + strconv.Itoa(200+w.rng.IntN(3000)) + `}`
		w.await(n, t.serve("POST", "/v1/admit", a.key, body, w.now), func(st int, m map[string]any) {
			if st == 200 {
				a.live = append(a.live, &reservation{id: m["reservation"].(string), node: n, quote: core.CostUnits(m["quote"].(float64))})
			}
		}, nil)
	default:
		w.stage(a)
	}
}

// report sends one post-paid usage event for a, sometimes larger than what
// is left: the account's scopes go into debt. A 200 bills it; a 503
// (ledger unavailable) leaves it durable, to be billed by the exporter; a
// crash before the answer leaves it uncertain.
func (w *World) report(n *node, a *account, t *transport) {
	w.stats.Reports++
	units := core.CostUnits(1 + w.rng.IntN(50*int(a.weight)))
	if w.rng.IntN(10) == 0 {
		units *= 100
	}
	ev := `{"events":[{"id":"pp-` + strconv.Itoa(w.stats.Reports) + `","agent_id":"` + string(a.id) + `","units":` +
		strconv.FormatUint(uint64(units), 10) + `,"occurred_at":"` + time.Unix(0, w.now).UTC().Format(time.RFC3339) + `"}]}`
	w.await(n, t.serve("POST", "/v1/usage", platformToken, ev, w.now), func(st int, m map[string]any) {
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

// administer changes the ledger as the admin API would and tells the
// nodes.
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
		units := core.CostUnits(1000 + w.rng.IntN(20_000))
		changed, _, err = w.store.Deposit(ctx, id, units, "d"+strconv.Itoa(w.stats.Steps), w.now)
		w.byID[id].deposited += units
	case 1, 2: // suspend or reactivate a scope
		id := []core.AccountID{"ws", "org", "a1"}[w.rng.IntN(3)]
		st := core.StatusActive
		if w.rng.IntN(2) == 0 {
			st = core.StatusSuspended
		}
		changed, err = w.store.SetStatus(ctx, id, st)
	case 3: // a new policy generation
		a := w.accounts[w.rng.IntN(len(w.accounts))]
		w.setPolicy(a.id, a.weight, 100+w.rng.IntN(5), "")
		changed, err = w.store.Account(ctx, a.id)
	}
	if err != nil {
		w.fail("administer: %v", err)
	}
	w.changed(changed)
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
	if _, err := w.store.RevokeKey(ctx, a.id, a.keyID); err != nil {
		w.fail("revoke key: %v", err)
	}
	for _, n := range w.live() {
		n.prov.BindKey(digest(key), a.id)
		n.prov.RevokeKey(digest(a.key))
	}
	a.key, a.keyID = key, id
}

// stage moves one of a's reservations on: commit, finish or cancel, on any
// shard of the node that admitted it (another shard forwards it to the
// owner).
func (w *World) stage(a *account) {
	r := a.live[w.rng.IntN(len(a.live))]
	n := r.node
	if n.dead {
		return
	}
	t := n.transports[w.rng.IntN(len(n.transports))]
	body := `{"reservation":"` + r.id + `"}`
	switch {
	case !r.committed && w.rng.IntN(5) == 0:
		w.await(n, t.serve("POST", "/v1/cancel", a.key, body, w.now), func(st int, _ map[string]any) {
			if st == 200 {
				a.forget(r)
			}
		}, nil)
	case !r.committed:
		w.await(n, t.serve("POST", "/v1/commit", a.key, body, w.now), func(st int, _ map[string]any) {
			if st == 200 {
				r.committed = true
			}
		}, func() { a.maybe += r.quote })
	case !r.finishing:
		units := core.CostUnits(w.rng.Uint64N(uint64(r.quote) + 1))
		r.finishing = true
		body = `{"reservation":"` + r.id + `","units":` + strconv.FormatUint(uint64(units), 10) + `}`
		w.await(n, t.serve("POST", "/v1/finish", a.key, body, w.now), func(st int, _ map[string]any) {
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
	var pool []*account
	for _, a := range w.accounts {
		if a.hot || w.rng.IntN(3) == 0 {
			pool = append(pool, a)
		}
	}
	if len(pool) == 0 || w.rng.IntN(3) == 0 {
		pool = w.accounts[:6] // the seeded hierarchy
	}
	return pool[w.rng.IntN(len(pool))]
}

// await handles a request's answer now or when it comes.
func (w *World) await(n *node, r *request, done func(int, map[string]any), lost func()) {
	p := &pending{r: r, node: n, done: done, lost: lost}
	if r.done {
		r.at = w.now
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
	k := 0
	for _, p := range w.clients {
		if p.r.done {
			p.r.at = w.now
			w.answer(p)
			continue
		}
		w.clients[k] = p
		k++
	}
	clear(w.clients[k:])
	w.clients = w.clients[:k]
}

// loseClients drops the answers a dead node owed, and its reservations:
// what they may have billed is uncertain.
func (w *World) loseClients(n *node) {
	k := 0
	for _, p := range w.clients {
		if p.node != n {
			w.clients[k] = p
			k++
			continue
		}
		if p.lost != nil {
			p.lost()
		}
	}
	clear(w.clients[k:])
	w.clients = w.clients[:k]
	for _, a := range w.accounts {
		kept := a.live[:0]
		for _, r := range a.live {
			if r.node != n {
				kept = append(kept, r)
				continue
			}
			if r.committed || r.finishing {
				a.maybe += r.quote // billed at its quote if its finish never became durable
			}
		}
		a.live = kept
	}
}

// unbilledLost notes, as uncertain, the usage in sp's last k durable
// records (every one with k 0: a lost volume) that the ledger has not
// billed: a damaged disk lost it before the exporter billed it. It
// returns the units of that usage per lease that funded it.
func (w *World) unbilledLost(sp *memSpool, holder string, k int) map[uint64]core.CostUnits {
	perLease := map[uint64]core.CostUnits{}
	mark, err := w.store.ExportMark(context.Background(), holder)
	if err != nil {
		w.fail("export mark of %s: %v", holder, err)
	}
	from := sp.released + 1
	if k > 0 && sp.durable >= uint64(k) {
		from = max(from, sp.durable-uint64(k)+1)
	}
	commits := map[[16]byte]core.CostUnits{} // the commit entries that survive, by event id
	for seq := sp.released + 1; seq < from; seq++ {
		if rec, err := record.Decode(sp.records[seq-sp.first]); err == nil && rec.Kind == record.Commit {
			commits[rec.Usage.ID] = rec.Usage.Units
		}
	}
	for seq := from; seq <= sp.durable; seq++ {
		rec, err := record.Decode(sp.records[seq-sp.first])
		if err != nil {
			w.fail("spool record %d: %v", seq, err)
		}
		if rec.Kind != record.Usage {
			continue
		}
		a := w.byID[rec.Usage.Account]
		if a == nil {
			w.fail("spool record %d bills %s, which the simulator does not know", seq, rec.Usage.Account)
		}
		if seq <= mark {
			continue // billed
		}
		a.maybe += rec.Usage.Units // it may never be billed
		if rec.Usage.Source == record.SourceLease {
			perLease[rec.Usage.LeaseID] += rec.Usage.Units
		}
		quote, journaled := commits[rec.Usage.ID]
		switch {
		case journaled:
			// Its commit entry survives it: recovery bills the quote.
			a.maybe += quote
		case rec.Usage.Source != record.SourcePostPaid:
			a.lost += rec.Usage.Units
		}
	}
	return perLease
}

func (a *account) String() string {
	return fmt.Sprintf("%s (acked %d, maybe %d)", a.id, a.acked, a.maybe)
}
