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
}

type publishedStats struct {
	mu sync.Mutex // taken once per tick by the shard and per scrape: never on a request
	s  Stats
}

// PublishStats copies the shard's counters for Stats. Call it on the
// shard's thread.
func (s *Shard) PublishStats() {
	st := Stats{Engine: s.engine.Counters(), InFlight: s.engine.InFlight(),
		ParkedAcks: int(s.acks.tail - s.acks.head), PendingOut: len(s.pendingOut),
		FundingWaiting: len(s.waits.order), FundingWaits: s.waited, FundingWaitsExpired: s.waitsExpired,
		FundingWaitsFull: s.waitsFull, FundingWaitsAbandoned: s.waitsAbandoned}
	s.pub.mu.Lock()
	s.pub.s = st
	s.pub.mu.Unlock()
}

// Stats returns the counters last published. Any goroutine may call it.
func (s *Shard) Stats() Stats {
	s.pub.mu.Lock()
	defer s.pub.mu.Unlock()
	return s.pub.s
}

// Engine is the shard's engine, for tests and tools on the shard's thread.
func (s *Shard) Engine() *core.Engine { return s.engine }
