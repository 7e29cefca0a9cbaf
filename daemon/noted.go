package daemon

import (
	"sync/atomic"

	"github.com/tollgated/tollgated/spool"
)

// notedSpool is the spool as the plane and the exporter read it: its
// durable mark, or the one OnDurable last reported if that is higher. The
// spool calls OnDurable before it publishes the mark, and the callback
// wakes both readers: one that ran at once read the old mark and went back
// to sleep, leaving the batch unacknowledged until the plane's next beat
// and, for the exporter when nothing more arrived, unbilled. A noted mark
// is durable: OnDurable reports only batches on disk.
type notedSpool struct {
	*spool.Spool
	mark atomic.Uint64
}

func (s *notedSpool) note(seq uint64) {
	for {
		m := s.mark.Load()
		if seq <= m || s.mark.CompareAndSwap(m, seq) {
			return
		}
	}
}

// Durable is the highest sequence known to be on disk.
func (s *notedSpool) Durable() uint64 { return max(s.Spool.Durable(), s.mark.Load()) }
