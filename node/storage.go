//go:build linux

package node

import (
	"time"

	"github.com/tollgated/tollgated/shard"
)

// degradedWait bounds each of Shutdown's waits — for requests in flight,
// for the leases to be released — when the spool cannot take records
// (Config.Storage): answers waiting for durable usage, and leases whose
// release waits for it, would otherwise hold a SIGTERM for the whole
// shutdown grace plus the lease wait while the disk stays full or broken.
// What is in flight without needing the disk (a funding wait, a
// forwarded operation) ends within it. Leases left held are released by
// the node's next start (control.Recover), usage left unwritten was never
// acknowledged.
const degradedWait = 500 * time.Millisecond

// storageDegraded reports whether the spool cannot take records now.
func (n *Node) storageDegraded() bool {
	return n.cfg.Storage != nil && n.cfg.Storage.Load() != shard.StorageOK
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
