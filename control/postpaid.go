package control

import (
	"sync"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/shard"
)

// postPaid bills a batch of seed-000 usage reports: spool every event, and
// once they are durable ingest them into the ledger, then answer the shard
// with the ledger's counts. Without a spool or a ledger the batch fails:
// nothing is acknowledged that is not kept.
func (p *Plane) postPaid(from int, m *shard.Outbound) {
	b := m.Batch
	reply := shard.Inbound{Kind: shard.InPostPaidDone, Ticket: m.Ticket, Batch: b}
	if p.durable == nil || p.ledger == nil {
		b.Failed = true
		p.send(from, reply)
		return
	}
	if len(b.Events) == 0 {
		p.send(from, reply)
		return
	}
	events := make([]ledger.Usage, len(b.Events))
	for i, e := range b.Events {
		events[i] = ledger.Usage{ID: e.ID, Account: e.Account, Source: ledger.UsagePostPaid,
			Units: e.Units, OccurredAt: e.OccurredAt}
	}
	if p.cfg.Claims != nil {
		p.cfg.Claims.claim(events)
	}
	for i := range events {
		p.durable.append(from, 0, &events[i])
	}
	p.durable.after(from, func() {
		job := ledgerJob{kind: jobIngest, account: events[0].Account, events: events, now: p.cfg.Now()}
		p.ledger.worker.submit(job, func(r ledgerResult) {
			if p.cfg.Claims != nil {
				p.cfg.Claims.release(events)
			}
			p.postPaidBilled(b, r)
			p.send(from, reply)
		})
	})
}

// postPaidBilled counts the ledger's answer into the batch. A failed
// ingest leaves the events to the exporter: they are durable already.
func (p *Plane) postPaidBilled(b *shard.PostPaidBatch, r ledgerResult) {
	if r.err != nil {
		b.Failed = true
		return
	}
	var changed []core.AccountID
	for i, res := range r.results {
		switch res {
		case ledger.Accepted:
			b.Accepted++
			changed = append(changed, r.job.events[i].Account)
		case ledger.Duplicate:
			b.Duplicate++
		default:
			b.Rejected++
		}
	}
	if len(changed) > 0 && p.cfg.UsageChanged != nil {
		go p.cfg.UsageChanged(changed)
	}
}

// PostPaidClaims are post-paid events the plane is billing itself (to
// answer the reporter with the ledger's counts). The exporter must not
// bill a claimed event first — the reporter would be told "duplicate" for
// its own first report — so it stops before one and resumes once the plane
// lets go of it (after billing it, or after failing to, when the exporter
// bills it as any other).
type PostPaidClaims struct {
	mu  sync.Mutex
	ids map[[16]byte]int
}

// NewPostPaidClaims returns an empty claim set; share it between the
// plane (Config.Claims) and the exporter (Exporter.Claims).
func NewPostPaidClaims() *PostPaidClaims { return &PostPaidClaims{ids: make(map[[16]byte]int)} }

func (c *PostPaidClaims) claim(evs []ledger.Usage) {
	c.mu.Lock()
	for i := range evs {
		c.ids[evs[i].ID]++
	}
	c.mu.Unlock()
}

func (c *PostPaidClaims) release(evs []ledger.Usage) {
	c.mu.Lock()
	for i := range evs {
		if c.ids[evs[i].ID]--; c.ids[evs[i].ID] <= 0 {
			delete(c.ids, evs[i].ID)
		}
	}
	c.mu.Unlock()
}

// held reports whether id is claimed.
func (c *PostPaidClaims) held(id [16]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[id] > 0
}
