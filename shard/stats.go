package shard

import (
	"sync"

	"github.com/tollgated/tollgated/core"
)

// Stats is what a shard publishes for scrapers: the engine's counters and
// the shard's own. Only the shard's thread writes the live values; it
// copies them here on its tick (PublishStats), so a scraper on another
// goroutine never reads state the shard is changing.
type Stats struct {
	Engine     core.Counters
	InFlight   int
	ParkedAcks int // answers waiting for durable usage
	// PendingOut is the messages waiting for room in the ring to the
	// control plane (outbox.go).
	PendingOut int
	// FundingWaiting is the requests waiting for funding now; FundingWaits
	// counts every request that waited, FundingWaitsExpired those still
	// refused at their deadline, FundingWaitsFull those refused at once
	// because the table was full.
	// FundingWaitsAbandoned those dropped because their client had gone.
	FundingWaiting                                                             int
	FundingWaits, FundingWaitsExpired, FundingWaitsFull, FundingWaitsAbandoned uint64
	// InternalErrors counts panics recovered in decoders (recover.go):
	// each was answered 500 internal. Anything but 0 is a bug.
	InternalErrors uint64
	Platform       PlatformStats
}

// PlatformStats counts what the platform routes (seed 000) answered, so an
// operator can alert when agents fail open: an agent admits on every
// answer that is not a 200 decision.
type PlatformStats struct {
	// Decisions counts GET /v1/admission's 200 answers by what they
	// decided (AdmissionReason).
	Decisions [NumAdmissionReasons]uint64
	// Unauthorized counts 401s per route; BadRequests the other refusals
	// before any work (400, 405, 413).
	Unauthorized, BadRequests [NumPlatformRoutes]uint64
	// Usage counts post-paid events by result: accepted (billed now),
	// duplicate (billed before), rejected (no such agent), failed (not
	// billed now: ledger unavailable or accounting busy; the reporter
	// retries the batch).
	Usage [NumUsageResults]uint64
}

// platformRoute indexes PlatformStats' per-route counters.
type platformRoute uint8

const (
	routeAdmission platformRoute = iota
	routeUsage
	NumPlatformRoutes
)

// PlatformRoutes names the platform routes, by platformRoute index.
var PlatformRoutes = [NumPlatformRoutes]string{routeAdmission: "admission", routeUsage: "usage"}

// Post-paid event results, indexing PlatformStats.Usage.
const (
	UsageAccepted = iota
	UsageDuplicate
	UsageRejected
	UsageFailed
	NumUsageResults
)

// UsageResults names the post-paid results, by index.
var UsageResults = [NumUsageResults]string{"accepted", "duplicate", "rejected", "failed"}

type publishedStats struct {
	mu sync.Mutex // taken once per tick by the shard and per scrape: never on a request
	s  Stats
	// The latency histograms (latency.go) are kept apart from Stats: they
	// are most of its size, and are copied once per tick, here, only.
	lat     Latency
	untimed uint64
}

// PublishStats copies the shard's counters for Stats. Call it on the
// shard's thread.
func (s *Shard) PublishStats() {
	st := Stats{Engine: s.engine.Counters(), InFlight: s.engine.InFlight(),
		ParkedAcks: int(s.acks.tail - s.acks.head), PendingOut: len(s.pendingOut),
		FundingWaiting: len(s.waits.order), FundingWaits: s.waited, FundingWaitsExpired: s.waitsExpired,
		FundingWaitsFull: s.waitsFull, FundingWaitsAbandoned: s.waitsAbandoned,
		InternalErrors: s.internalErrors, Platform: s.platformStats}
	s.pub.mu.Lock()
	s.pub.s = st
	if !s.lat.off {
		s.pub.lat, s.pub.untimed = s.lat.hist, s.lat.untimed
	}
	s.pub.mu.Unlock()
}

// Latency copies the latency histograms last published into dst and
// returns how many postponed answers went untimed (latency.go). Any
// goroutine may call it.
func (s *Shard) Latency(dst *Latency) (untimed uint64) {
	s.pub.mu.Lock()
	defer s.pub.mu.Unlock()
	*dst = s.pub.lat
	return s.pub.untimed
}

// Stats returns the counters last published. Any goroutine may call it.
func (s *Shard) Stats() Stats {
	s.pub.mu.Lock()
	defer s.pub.mu.Unlock()
	return s.pub.s
}

// Engine is the shard's engine, for tests and tools on the shard's thread.
func (s *Shard) Engine() *core.Engine { return s.engine }

// Add adds o's counts to p (summing shards).
func (p *PlatformStats) Add(o *PlatformStats) {
	for i := range p.Decisions {
		p.Decisions[i] += o.Decisions[i]
	}
	for i := range p.Unauthorized {
		p.Unauthorized[i] += o.Unauthorized[i]
		p.BadRequests[i] += o.BadRequests[i]
	}
	for i := range p.Usage {
		p.Usage[i] += o.Usage[i]
	}
}

// Quiet reports whether the shard has nothing due soon: no reservation in
// flight (their deadlines are swept), no request waiting for funding, no
// answer waiting for durability and no message waiting for ring room. Its
// loop may then sleep longer between ticks. Call it on the shard's thread.
func (s *Shard) Quiet() bool {
	return s.engine.InFlight() == 0 && len(s.waits.order) == 0 && s.acks.head == s.acks.tail &&
		len(s.pendingOut) == 0
}
