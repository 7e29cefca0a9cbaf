package main

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/affinity"
	"github.com/tollgated/tollgated/core"
)

// daemon owns the running shards.
type daemon struct {
	log    zerolog.Logger
	quit   chan struct{}
	done   sync.WaitGroup
	shards []shardInfo
}

type shardInfo struct {
	id     int
	cpu    int
	pinned bool
}

// startDaemon starts one goroutine per shard, each locked to its own OS
// thread and pinned to its CPU, owning its own engine. It returns once every
// shard reports in.
func startDaemon(cfg config, log zerolog.Logger) (*daemon, error) {
	cpus := cfg.cpus
	if len(cpus) == 0 {
		var err error
		if cpus, err = affinity.Allowed(); err != nil {
			return nil, fmt.Errorf("listing allowed CPUs: %w", err)
		}
	}
	n := cfg.shards
	if n == 0 {
		n = len(cpus)
	}
	if !affinity.Supported() {
		log.Warn().Msg("CPU pinning is not supported on this platform; shards run unpinned")
	}
	d := &daemon{log: log, quit: make(chan struct{}), shards: make([]shardInfo, n)}
	ready := make(chan shardInfo, n)
	for i := range n {
		cpu := cpus[i%len(cpus)]
		d.done.Add(1)
		go d.runShard(i, cpu, cfg, ready)
	}
	for range n {
		s := <-ready
		d.shards[s.id] = s
		log.Info().Int("shard", s.id).Int("cpu", s.cpu).Bool("pinned", s.pinned).Msg("shard started")
	}
	log.Info().Int("shards", n).Str("listen", cfg.listen).Msg("tollgated ready")
	return d, nil
}

func (d *daemon) runShard(id, cpu int, cfg config, ready chan<- shardInfo) {
	defer d.done.Done()
	err := affinity.Pin(cpu)
	pinned := err == nil
	if err != nil && !errors.Is(err, affinity.ErrUnsupported) {
		d.log.Warn().Int("shard", id).Int("cpu", cpu).Err(err).Msg("pinning failed; shard runs unpinned")
	}
	e := core.NewEngine(core.Config{MaxReservations: cfg.maxInFlight})
	ready <- shardInfo{id: id, cpu: cpu, pinned: pinned}
	// The event loop arrives with the data plane; until then a shard only
	// sweeps its engine's deadlines, reading the clock once per iteration.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-d.quit:
			return
		case now := <-tick.C:
			e.Expire(now.UnixNano())
		}
	}
}

func (d *daemon) shutdown() {
	close(d.quit)
	d.done.Wait()
}
