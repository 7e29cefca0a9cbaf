package shard

import (
	"sync/atomic"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/cpu"

	"github.com/tollgated/tollgated/core"
)

// StorageState is whether the node can make billed usage durable.
type StorageState uint32

const (
	// StorageOK: the spool takes records.
	StorageOK StorageState = iota
	// StorageFull: the spool's filesystem has no room for more than the
	// records already on their way. Requests that would bill are refused
	// 503 storage-full until the spool has room again, which it finds by
	// itself.
	StorageFull
	// StorageFailed: the spool failed a sync (or a write, for another
	// reason than room) and nothing more becomes durable: requests that
	// would bill are refused 503 storage-failed until a restart.
	StorageFailed
)

// Storage is the node's StorageState: one word per node, stored when the
// spool's health changes (the daemon wires spool.Options.OnHealth to it),
// read by every shard before it admits a request that would bill, and by
// /readyz. A request refused here was refused before its usage slot and
// its admission: nothing is debited, no reservation made, nothing to
// bill. The read is one atomic load of a line that changes only with the
// disk's state, so it costs a shared cache hit on the hot path.
//
// Usage already on its way (a finish, a commit, a lapse at a deadline) is
// never refused: it goes into the zeros the spool reserved ahead of its
// records, which is what lets the spool say "full" before anything that
// was admitted lacks room.
type Storage struct {
	_ cpu.CacheLinePad
	v atomic.Uint32
	_ cpu.CacheLinePad
}

// Set records the node's storage state; the writer is the spool's flusher.
func (s *Storage) Set(v StorageState) {
	if s.v.Load() != uint32(v) {
		s.v.Store(uint32(v))
	}
}

// Load returns the state Set last recorded.
func (s *Storage) Load() StorageState { return StorageState(s.v.Load()) }

// storageRefusal is the refusal of a request that needs the spool while
// the spool cannot take it, or DenyNone.
func (s *Shard) storageRefusal() core.DenyReason {
	if s.cfg.Storage == nil {
		return core.DenyNone
	}
	switch s.cfg.Storage.Load() {
	case StorageFull:
		return core.DenyStorageFull
	case StorageFailed:
		return core.DenyStorageFailed
	}
	return core.DenyNone
}

// refuseForStorage answers a request that would need the spool 503 when
// the spool cannot take it, counting the refusal; it reports whether it
// did.
func (s *Shard) refuseForStorage(r *Request) bool {
	reason := s.storageRefusal()
	if !reason.Denied() {
		return false
	}
	s.engine.CountDenial(reason)
	s.writeDenial(r.Resp, core.Denial{Reason: reason})
	return true
}

// storageUnready answers /readyz for a node whose spool cannot take
// records, and reports whether it did: a balancer should send the
// requests elsewhere.
func (s *Shard) storageUnready(resp *fasthttp.Response) bool {
	switch s.storageRefusal() {
	case core.DenyStorageFull:
		s.writeProblem(resp, fasthttp.StatusServiceUnavailable, "storage-full",
			"The usage spool's filesystem is full: requests that bill are refused until it has room")
	case core.DenyStorageFailed:
		s.writeProblem(resp, fasthttp.StatusServiceUnavailable, "storage-failed",
			"The usage spool failed a write or sync: requests that bill are refused until a restart")
	default:
		return false
	}
	return true
}
