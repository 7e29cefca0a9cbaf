//go:build linux

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/affinity"
	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/node"
)

// daemon is a running tollgated.
type daemon struct {
	log   zerolog.Logger
	node  *node.Node
	grace time.Duration
}

// startDaemon starts the node: one pinned shard per CPU (or --shards of
// them, spread over the CPUs), the control plane, and the demo account if
// asked for.
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
	shardCPUs := make([]int, n)
	for i := range shardCPUs {
		shardCPUs[i] = cpus[i%len(cpus)]
	}
	if !affinity.Supported() {
		log.Warn().Msg("CPU pinning is not supported on this platform; shards run unpinned")
	}
	secret, err := serverSecret(cfg, log)
	if err != nil {
		return nil, err
	}
	funder := control.NewMemoryFunder(int64(time.Hour))
	nd, err := node.Start(node.Config{
		Listen: cfg.listen, CPUs: shardCPUs, Secret: secret, MaxReservations: cfg.maxInFlight,
		Loop: httploop.Config{
			MaxHeaderBytes: cfg.loop.maxHeaderBytes, MaxBodyBytes: cfg.loop.maxBodyBytes,
			MaxConns: cfg.loop.maxConns, MaxOutput: cfg.loop.maxOutput,
			IdleTimeout: cfg.loop.idle, HeaderTimeout: cfg.loop.header, BodyTimeout: cfg.loop.body,
		},
		Funder: funder, Usage: &discardUsage{}, Log: log,
	})
	if err != nil {
		return nil, err
	}
	d := &daemon{log: log, node: nd, grace: cfg.shutdownGrace}
	for _, s := range nd.Shards() {
		log.Info().Int("shard", s.ID).Int("cpu", s.CPU).Bool("pinned", s.Pinned).Msg("shard started")
	}
	if cfg.demoKey != "" {
		if err := provisionDemo(nd.Plane(), funder, secret, cfg.demoKey, core.CostUnits(cfg.demoUnits)); err != nil {
			d.shutdown()
			return nil, err
		}
		log.Warn().Msg("demo account \"demo\" provisioned with in-memory funding: not for billing")
	}
	nd.Plane().MarkReady()
	log.Info().Int("shards", n).Str("listen", nd.Addr()).Msg("tollgated ready")
	return d, nil
}

func (d *daemon) shutdown() {
	d.node.Shutdown(time.Now().Add(d.grace))
}

func serverSecret(cfg config, log zerolog.Logger) ([]byte, error) {
	if cfg.secretHex != "" {
		return hex.DecodeString(cfg.secretHex)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	log.Warn().Msg("no --secret given: using a random one, so API keys are valid for this run only")
	return b, nil
}

// provisionDemo installs account "demo": generous limits, a small cost
// table, and the given key.
func provisionDemo(p *control.Plane, f *control.MemoryFunder, secret []byte, key string, units core.CostUnits) error {
	if err := f.Deposit("demo", units, core.ScopeAgent); err != nil {
		return err
	}
	snap := &core.Snapshot{
		Account: "demo", Generation: 1, Permissions: 1, PermissionNames: []string{"chat"},
		Limits: core.Limits{MaxItems: 1 << 20, HoldTimeout: int64(time.Minute)},
		Costs: core.CostTable{Classes: []core.OpClass{
			{Name: "input_tokens", Weight: 1}, {Name: "output_tokens", Weight: 4}, {Name: "requests", Weight: 10},
		}},
	}
	if err := p.Install(snap); err != nil {
		return err
	}
	h, err := credential.NewHasher(secret)
	if err != nil {
		return err
	}
	d, err := h.Digest([]byte(key))
	if err != nil {
		return err
	}
	p.BindKey(d, "demo")
	return nil
}

// discardUsage counts billed usage until the durable spool (the ledger
// issue) takes it.
type discardUsage struct{ events, units uint64 }

func (u *discardUsage) Record(ev *core.UsageEvent) {
	u.events++
	u.units += uint64(ev.Units)
}
