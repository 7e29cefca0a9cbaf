//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/admin"
	"github.com/tollgated/tollgated/affinity"
	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/fleet"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/pgstore"
	"github.com/tollgated/tollgated/node"
	"github.com/tollgated/tollgated/shard"
	"github.com/tollgated/tollgated/spool"
)

// daemon is a running tollgated: the ledger and the spool in the data
// directory, the node (shards and control plane), the exporter and the
// ledger's maintenance, and the admin API.
type daemon struct {
	log      zerolog.Logger
	store    ledger.Store
	spool    *spool.Spool
	noted    *notedSpool // the spool as the plane and the exporter read it
	node     *node.Node
	exporter *control.Exporter
	prov     *control.Provisioner
	claims   *control.PostPaidClaims
	admin    *http.Server
	adminAPI *admin.Server // the admin API Serve serves on admin
	stop     chan struct{}
	done     chan struct{}
	grace    time.Duration
	out      io.Writer                     // where the generated admin token is printed, once
	plane    atomic.Pointer[control.Plane] // for the spool's durability callback
	exported atomic.Pointer[control.Exporter]
	// On a PostgreSQL ledger (fleet.go): the change log's follower, the
	// change it follows from and its lag, and the funds announcements'
	// follower and its refreshes.
	follower   *fleet.Follower
	funds      *fleet.Funds
	announce   *fleet.Announcements // nil on the embedded ledger
	followFrom uint64
	changeLag  prometheus.Histogram
	refreshes  *prometheus.CounterVec // funds refreshes by kind and result
	nodeID     string                 // the billed-event stream's source: the incarnation's holder name
	// storage is the spool's health as the shards read it (storage.go).
	storage *shard.Storage
	// ports hold the data-plane and admin ports (claim.go) until close.
	ports addressClaims
	// Identity (identity.go): this start's incarnation, its claim on its
	// node id on PostgreSQL, and where a lost claim is reported.
	inc     ledger.Incarnation
	claimed *pgstore.Claim
	failed  chan error
	// droppedRecords is what recovery found the spool's cut tail held
	// (reportSpoolRecovery): the metric says what the WARN said.
	droppedRecords uint64
}

// startDaemon brings tollgated up in dependency order; on any failure it
// closes what it opened.
func startDaemon(cfg config, log zerolog.Logger, out io.Writer) (_ *daemon, err error) {
	ports, err := claimAddresses(cfg) // held until the daemon has stopped (close)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ports.release()
		}
	}()
	if err := checkAddresses(cfg); err != nil {
		return nil, err
	}
	shardCPUs, err := pickCPUs(cfg, log)
	if err != nil {
		return nil, err
	}
	useProcs(len(shardCPUs))
	if err := openDataDir(cfg.dataDir); err != nil {
		return nil, err
	}
	warnAboutExposure(cfg, log)
	secret, generatedSecret, err := serverSecret(cfg, log)
	if err != nil {
		return nil, err
	}
	hasher, err := credential.NewHasher(secret)
	if err != nil {
		return nil, err
	}
	d := &daemon{log: log, grace: cfg.shutdownGrace, stop: make(chan struct{}), done: make(chan struct{}), out: out,
		ports: ports, failed: make(chan error, 1)}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.store, err = openStore(cfg, log); err != nil {
		return nil, err
	}
	ctx := context.Background()
	if err := matchSecret(ctx, d.store, cfg, secret, log); err != nil {
		if generatedSecret && errors.Is(err, errSecretMismatch) {
			// This start made it, and the ledger is bound to another: a
			// file left behind would only make the next start fail the
			// same way while looking like the data dir's own secret.
			os.Remove(filepath.Join(cfg.dataDir, secretFile))
		}
		return nil, err
	}
	if cfg.demoKey != "" {
		if err := provisionDemo(ctx, d.store, hasher, cfg.demoKey, core.CostUnits(cfg.demoUnits), time.Now().UnixNano()); err != nil {
			return nil, err
		}
		log.Warn().Msg("demo account \"demo\" provisioned with --demo-key (for trying tollgated, not for production keys)")
	}
	if err := d.openSpool(cfg); err != nil {
		return nil, err
	}
	if err := d.establishIdentity(ctx, cfg); err != nil {
		return nil, err
	}
	holder := d.inc.Holder()
	d.newExporter(holder)
	if _, err := d.recover(ctx, holder); err != nil {
		return nil, err
	}
	var prov atomic.Pointer[control.Provisioner]
	d.node, err = node.Bind(node.Config{
		Listen: cfg.listen, CPUs: shardCPUs, Secret: secret, MaxReservations: cfg.maxInFlight,
		Loop: httploop.Config{
			MaxHeaderBytes: cfg.loop.maxHeaderBytes, MaxBodyBytes: cfg.loop.maxBodyBytes,
			MaxConns: cfg.loop.maxConns, MaxOutput: cfg.loop.maxOutput,
			IdleTimeout: cfg.loop.idle, HeaderTimeout: cfg.loop.header, BodyTimeout: cfg.loop.body,
		},
		Plane: control.Config{
			Store: d.store, Spool: d.noted, Appended: d.spool.Stats().Appended,
			IsFull: func(err error) bool { return errors.Is(err, spool.ErrFull) },
			Holder: holder, Lease: control.LeaseConfig{TTL: cfg.leaseTTL}, Claims: d.claims,
			FundingChanged: func(ids []core.AccountID) {
				if p := prov.Load(); p != nil {
					p.UsageChanged(ids)
				}
			},
			KeysUsed: func(keys []plane.KeyUsed) {
				if p := prov.Load(); p != nil {
					p.KeysUsed(keys)
				}
			},
			Announce: d.announcer(holder),
		},
		Durable: cfg.ack == "durable", FundingWait: fundingWait(cfg.fundingWait),
		DrainUsage: d.drainUsage, Log: log, Storage: d.storage, AuthzKeyHeader: cfg.authz.keyHeader,
	})
	if err != nil {
		return nil, err
	}
	d.plane.Store(d.node.Plane())
	d.exporter.Floor = d.node.Plane().Floor
	if d.announce != nil {
		d.announce.Plane = d.node.Plane()
	}
	d.prov = control.NewProvisioner(d.node.Plane(), d.store)
	d.prov.Grace = cfg.leaseGrace
	d.prov.EventRetention = cfg.retention
	d.prov.OnError = func(err error) {
		log.Error().Err(err).Msg("a credential change could not reach the shards; it is in the ledger and loads at the next start")
	}
	prov.Store(d.prov)
	d.node.StartPlane()
	d.exporter.Changed = d.prov.UsageChanged
	d.exporter.OnError = func(err error) {
		log.Error().Err(err).Msg("usage export to the ledger failed; retrying (the usage stays in the spool)")
	}
	if err := d.prepareFollower(ctx); err != nil {
		return nil, fmt.Errorf("reading the ledger's change log: %w", err)
	}
	accounts, keys, err := d.prov.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the ledger: %w", err)
	}
	go d.background()
	adminAddr, err := d.startAdmin(ctx, cfg, hasher)
	if err != nil {
		return nil, err
	}
	if err := d.node.Plane().MarkReady(); err != nil {
		return nil, err
	}
	if err := d.openDataPlane(); err != nil { // clients are refused until now
		return nil, err
	}
	d.adminAPI.KeepHistory() // its collectors read the shards, which serve now
	if cfg.ack != "durable" {
		log.Warn().Str("ack", cfg.ack).Msg("answers are sent before their usage is on disk: a crash can lose the last few milliseconds of billed usage")
	}
	log.Info().Int("shards", len(shardCPUs)).Str("listen", d.node.Addr()).Str("admin", adminAddr).
		Int("accounts", accounts).Int("keys", keys).Str("data_dir", cfg.dataDir).Msg("tollgated ready")
	return d, nil
}

func pickCPUs(cfg config, log zerolog.Logger) ([]int, error) {
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
	out := make([]int, n)
	for i := range out {
		out[i] = cpus[i%len(cpus)]
	}
	if !affinity.Supported() {
		log.Warn().Msg("CPU pinning is not supported on this platform; shards run unpinned")
	}
	return out, nil
}

// openSpool opens the usage spool and counts what a previous run left in
// it; the exporter bills that first.
func (d *daemon) openSpool(cfg config) error {
	// Durable usage wakes the plane (answers wait on it), not the exporter:
	// the exporter runs on its interval, in big batches.
	noted := &notedSpool{}
	d.storage = new(shard.Storage)
	health := &spoolHealth{log: d.log, dir: filepath.Join(cfg.dataDir, spoolDir), storage: d.storage}
	s, err := spool.Open(health.dir, spool.Options{OnHealth: health.changed, FlushInterval: groupCommit(cfg.groupCommit), OnDurable: func(seq uint64) {
		noted.note(seq)
		if p := d.plane.Load(); p != nil {
			p.Kick()
		}
		if e := d.exported.Load(); e != nil {
			e.WakeAt(seq)
		}
		// Let the plane run now, on this thread: woken from here it waits
		// in this goroutine's run queue, and the flusher's next fdatasync
		// would leave it there, a blocked syscall with work queued behind
		// it, which the Go scheduler's monitor polls for every 20 µs.
		// Measured: the monitor's share of the CPU under durable checks
		// fell from 4.9–6.4% to 2.9–3.3% (BENCHMARKS.md).
		runtime.Gosched()
	}, SegmentBytes: cfg.events.segmentBytes, ArchiveDir: filepath.Join(cfg.dataDir, eventsDir),
		ArchiveMaxBytes: cfg.events.maxBytes, ArchiveMaxAge: cfg.events.maxAge})
	if err != nil {
		return spoolHint(err, cfg.dataDir)
	}
	noted.Spool = s
	d.spool, d.noted = s, noted
	if st := s.Stats(); st.Pruned > 0 {
		d.log.Warn().Uint64("segments", st.Pruned).Uint64("oldest", st.Oldest).
			Msg("billed-event archive: dropped segments that no longer join up with the spool (it was rebuilt); GET /v1/events starts after them")
	}
	replayed := 0
	if err := s.Replay(func(uint64, []byte) error { replayed++; return nil }); err != nil {
		return fmt.Errorf("replaying the usage spool: %w", err)
	}
	if replayed > 0 {
		d.log.Info().Int("events", replayed).Msg("usage spool replayed; billing it")
	}
	return nil
}

// newExporter makes the exporter that bills the spool as holder (the
// incarnation's name: its export mark is kept under it).
func (d *daemon) newExporter(holder string) {
	d.nodeID = holder
	d.exporter = control.NewExporter(d.noted, d.store, holder, exportBatch)
	d.exported.Store(d.exporter)
	d.claims = control.NewPostPaidClaims()
	d.exporter.Claims = d.claims
	d.exporter.Resume(d.spool.Stats().Released)
}

// recover bills what the spool holds and releases the leases holder held
// when it last stopped, before anything serves (control.RecoverWith): a
// node that comes back after kill -9 forfeits nothing.
func (d *daemon) recover(ctx context.Context, holder string) (control.Recovery, error) {
	cut := d.spool.Dropped().Bytes > 0
	r, err := control.RecoverWith(ctx, d.store, d.spool, d.exporter, control.RecoverOptions{Holder: holder, Now: time.Now().UnixNano(), SpoolCut: cut})
	if err != nil {
		return r, fmt.Errorf("recovering this node's leases: %w", err)
	}
	if r.Leases > 0 || r.OpenCommits > 0 || r.Restored > 0 {
		d.log.Info().Str("node", holder).Int("leases_released", r.Leases).Uint64("units_returned", uint64(r.Returned)).
			Int("forfeited_leases_restored", r.Restored).Uint64("units_restored", uint64(r.RestoredUnits)).
			Int("open_commits_billed", r.OpenCommits).Uint64("open_commit_units", uint64(r.OpenUnits)).
			Msg("recovered the leases this node held: billed what its spool holds, returned the rest")
	}
	if r.Forfeited > 0 {
		d.log.Warn().Str("node", holder).Int("leases", r.Forfeited).Uint64("units", uint64(r.ForfeitedUnits)).
			Msg("leases of this node were forfeited while it was away, and its spool was cut at start: they stay forfeited for good (their units stay in loss), since the cut records may have spent them (docs/RUNBOOK.md)")
	}
	if r.Withheld > 0 {
		d.log.Warn().Str("node", holder).Int("leases", r.Withheld).Uint64("units", uint64(r.WithheldUnits)).
			Msg("the leases this node held were released with nothing returned, since its spool was cut at start: their remainder stays in loss, as the cut records may have spent it (docs/RUNBOOK.md)")
	}
	if r.Unresolved > 0 {
		d.log.Warn().Str("node", holder).Int("commits", r.Unresolved).Uint64("units", uint64(r.UnresolvedUnits)).
			Msg("commits journaled before usage records the ledger had billed and the spool lost were not billed at their quote: a lost record may have been their bill (docs/RUNBOOK.md)")
	}
	d.reportSpoolRecovery(r)
	if r.Unaccounted > 0 {
		d.log.Error().Int("leases", r.Unaccounted).Msg("some leases of this node could not be released; the ledger forfeits them after expiry and grace")
	}
	return r, nil
}

// drainStale bills the spool of a data directory whose incarnation the
// ledger has replaced, settles that incarnation's leases from it (a whole
// spool restores its forfeited ones: it holds everything they spent), and
// refuses to serve: the node id belongs to the newer incarnation.
func (d *daemon) drainStale(ctx context.Context, cfg config, id string, spoolInc uint64, cur ledger.Incarnation) error {
	holder := ledger.HolderOf(id, spoolInc)
	d.newExporter(holder)
	r, err := d.recover(ctx, holder)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: this data directory is incarnation %d of node %q, but the ledger's node %q is incarnation %d, started %s on an empty data directory. "+
		"Billed what this data directory's spool held (%d records) against its own leases (%d released, %d forfeited ones restored, %d units back), and stops: "+
		"it must not serve under that id. Its usage is billed; remove %s, or give it a new --node-id and an empty data directory (docs/RUNBOOK.md)",
		errIdentity, spoolInc, id, id, cur.Number, time.Unix(0, cur.StartedAt).UTC().Format(time.RFC3339), r.Replayed, r.Leases, r.Restored,
		uint64(r.Returned+r.RestoredUnits), cfg.dataDir)
}

// background runs the exporter and the ledger's maintenance until stop.
func (d *daemon) background() {
	defer close(d.done)
	go d.prov.Maintain(d.stop, time.Second)
	defer d.follow(d.stop)()
	go d.pruneEvents(time.Minute)
	d.exporter.Run(d.stop, exportInterval)
}

// pruneEvents applies the billed-event archive's age bound every interval
// until stop: releases apply both bounds, but an idle node releases nothing.
func (d *daemon) pruneEvents(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case now := <-t.C:
			if _, err := d.spool.PruneArchive(now); err != nil {
				d.log.Error().Err(err).Msg("billed-event archive: pruning failed")
			}
		}
	}
}

// startAdmin serves the admin API and returns the address it listens on.
func (d *daemon) startAdmin(ctx context.Context, cfg config, hasher *credential.Hasher) (string, error) {
	token, generated, err := admin.EnsureAdminToken(ctx, d.store, cfg.adminToken, rand.Reader)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	if generated {
		// Printed once: only its digest is stored.
		fmt.Fprintf(d.out, "admin token (shown once; set TOLLGATED_ADMIN_TOKEN to choose your own): %s\n", token)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newNodeCollector(d), newBuildInfoCollector(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if d.changeLag != nil {
		reg.MustRegister(d.changeLag, d.refreshes)
	}
	// The dashboard's history samples the node's own series alone.
	history := prometheus.NewRegistry()
	history.MustRegister(newNodeCollector(d))
	srv, err := admin.New(admin.Config{Store: d.store, Hasher: hasher, Publisher: d.prov, Registry: reg, Log: d.log,
		Holdings: planeHoldings{d.node.Plane()}, Events: d.spool, Node: d.nodeID, Storage: d.adminStorage, History: history})
	if err != nil {
		return "", err
	}
	// Keys that expired while the node was down stop before it is ready.
	if err := srv.ExpireKeys(ctx); err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", cfg.admin)
	if err != nil {
		return "", fmt.Errorf("admin listener: %w", err)
	}
	if d.admin, err = srv.Serve(ln, cfg.adminLimits.limits()); err != nil {
		ln.Close()
		return "", err
	}
	d.adminAPI = srv
	return ln.Addr().String(), nil
}

// drainUsage makes every billed event durable and bills it into the
// ledger: the shutdown step between ending reservations and releasing
// leases.
func (d *daemon) drainUsage(deadline time.Time) {
	if err := d.spool.Sync(); err != nil {
		d.log.Error().Err(err).Msg("usage spool sync failed at shutdown; the spool is replayed at the next start")
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(5*time.Second))
	defer cancel()
	if err := d.exporter.Export(ctx); err != nil {
		d.log.Error().Err(err).Msg("usage export failed at shutdown; the spool is replayed at the next start")
	}
}

// shutdown stops in the safe order: the admin API, then the node (which
// drains requests, ends reservations, drains usage and releases leases),
// then the background work, the spool and the ledger.
func (d *daemon) shutdown() {
	if d.adminAPI != nil {
		d.adminAPI.StopHistory() // it reads the node, which stops below
	}
	if d.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.admin.Shutdown(ctx)
		cancel()
	}
	d.node.Shutdown(time.Now().Add(d.grace))
	d.node = nil
	close(d.stop)
	<-d.done
	st := d.exporter.Stats()
	d.log.Info().Uint64("events", st.Events).Uint64("settlements", st.Settlements).Uint64("units_billed", st.UnitsBilled).
		Uint64("units_rejected", st.UnitsRejected).Uint64("post_paid_accepted", st.PostAccepted).
		Msg("usage exported")
	d.close()
}

// close releases what is open, in reverse order.
func (d *daemon) close() {
	if d.adminAPI != nil {
		d.adminAPI.StopHistory()
	}
	if d.node != nil {
		d.node.Shutdown(time.Now())
	}
	if d.spool != nil {
		if err := d.spool.Close(); err != nil {
			d.log.Error().Err(err).Msg("closing the usage spool")
		}
	}
	if d.store != nil {
		if err := d.store.Close(); err != nil {
			d.log.Error().Err(err).Msg("closing the ledger")
		}
	}
	// The node's id is free for another process once nothing of this
	// one writes under it.
	if d.claimed != nil {
		d.claimed.Release()
	}
	// Last: the ports are free for another daemon only once this one
	// serves nothing and has let go of its data.
	d.ports.release()
}

// Usage moves from the spool to the ledger in few, large transactions: a
// ledger commit (and the spool's release mark) costs the same for one event
// as for thousands, and the exporter shares the CPUs with the shards.
const (
	exportBatch    = 4096
	exportInterval = 100 * time.Millisecond
)

// fundingWait turns the flag into node.Config's: 0 on the command line
// means no waiting, which the shard spells NoFundingWait.
func fundingWait(d time.Duration) int64 {
	if d == 0 {
		return shard.NoFundingWait
	}
	return int64(d)
}

// groupCommit turns the flag into spool.Options': 0 on the command line
// means no waiting between flushes, which the spool spells negative. With
// the plane's short beat, waiting 2 ms to gather records cost durable
// /v1/check about 12% of its throughput at 64 connections (BENCHMARKS.md).
func groupCommit(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// planeHoldings is the control plane as the admin API's Holdings: what
// this node's leases and slices hold for an account, unspent.
type planeHoldings struct{ p *control.Plane }

func (h planeHoldings) LeaseHoldings(id core.AccountID) core.CostUnits { return h.p.Holding(id) }

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
