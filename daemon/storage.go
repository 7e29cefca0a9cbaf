//go:build linux

package daemon

import (
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/admin"
	"github.com/tollgated/tollgated/shard"
	"github.com/tollgated/tollgated/spool"
)

// spoolHealth turns the spool's health into the word the shards read
// (shard.Storage) and one log line per change, never one per request: a
// full disk refuses thousands of requests a second, each counted in
// tollgated_denials_total{reason="storage-full"} instead. It runs on the
// spool's flusher goroutine (spool.Options.OnHealth).
type spoolHealth struct {
	log     zerolog.Logger
	dir     string // the spool's directory, whose filesystem is reported
	storage *shard.Storage
	since   time.Time // when the spool last became short of space
}

func (h *spoolHealth) changed(s spool.Health) {
	switch s {
	case spool.NoSpace:
		h.storage.Set(shard.StorageFull)
		h.since = time.Now()
		h.log.Warn().Str("dir", h.dir).Uint64("free_bytes", freeBytes(h.dir)).
			Msg("usage spool: its filesystem is full; refusing requests that bill (503 storage-full) until it has room, which it finds by itself")
	case spool.Healthy:
		h.storage.Set(shard.StorageOK)
		h.log.Info().Str("dir", h.dir).Dur("full_for", time.Since(h.since)).Uint64("free_bytes", freeBytes(h.dir)).
			Msg("usage spool: room again; serving requests that bill")
	case spool.Broken:
		h.storage.Set(shard.StorageFailed)
		h.log.Error().Str("dir", h.dir).
			Msg("usage spool: a write or sync failed; nothing more becomes durable and requests that bill are refused (503 storage-failed): restart tollgated once the disk is sound")
	}
}

// freeBytes is what the filesystem holding dir has free for an
// unprivileged writer, 0 if it cannot tell.
func freeBytes(dir string) uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return st.Bavail * uint64(st.Bsize)
}

// adminStorage is the storage state as the admin API's /healthz reports it.
func (d *Daemon) adminStorage() admin.StorageState {
	switch d.storage.Load() {
	case shard.StorageFull:
		return admin.StorageFull
	case shard.StorageFailed:
		return admin.StorageFailed
	}
	return admin.StorageOK
}
