//go:build linux

package daemon

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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/admin"
	"github.com/tollgated/tollgated/affinity"
	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/fleet"
	"github.com/tollgated/tollgated/grpcapi"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/pgstore"
	"github.com/tollgated/tollgated/node"
	"github.com/tollgated/tollgated/shard"
	"github.com/tollgated/tollgated/spool"
)

// Daemon is a running tollgated: the ledger and the spool in the data
// directory, the node (shards and control plane), the exporter and the
// ledger's maintenance, and the admin API.
//
// Open builds it in dependency order: the ports, the data directory, the
// ledger, the spool, the node's identity, recovery, the plane and shards,
// the provisioner, the background work (exporter, maintenance, fleet
// followers), the admin API, the data plane's listeners, and last the gRPC
// listener, which hands its decisions to the data plane. Close
// undoes it in the safe order (see Close); an Open that fails undoes what
// it did in reverse (close).
type Daemon struct {
	cfg      Config
	log      zerolog.Logger
	out      io.Writer // where the generated admin token is printed, once
	store    ledger.Store
	spool    *spool.Spool
	noted    *notedSpool // the spool as the plane and the exporter read it
	route    *router     // the effects that cross the construction order
	node     *node.Node
	exporter *control.Exporter
	prov     *control.Provisioner
	claims   *control.PostPaidClaims
	admin    *http.Server
	adminAPI *admin.Server // the admin API Serve serves on admin
	// The background work (exporter, maintenance, fleet followers) runs
	// until stop closes, and closes done when it has ended.
	stop, done chan struct{}
	background bool // it was started and not yet stopped
	// On a PostgreSQL ledger (fleet.go): the change log's follower, the
	// change it follows from and its lag, and the funds announcements'
	// follower and its refreshes.
	follower   *fleet.Follower
	funds      *fleet.Funds
	announce   *fleet.Announcements // nil on the embedded ledger
	followFrom uint64
	changeLag  prometheus.Histogram
	changes    *prometheus.CounterVec // changes applied, by how the follower learned of them
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
	adminAddr      string
	grpcStats      grpcapi.Stats // the gRPC services' counters, for metrics
	serving        atomic.Bool   // the data plane serves and is not draining
}

// Open brings tollgated up in dependency order, and serves once the
// shards hold the ledger's state; on any failure it closes what it opened
// and returns why. out receives the admin token Open generates, once.
func Open(cfg Config, log zerolog.Logger, out io.Writer) (_ *Daemon, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: log, out: out, stop: make(chan struct{}), done: make(chan struct{}),
		failed: make(chan error, 1), storage: new(shard.Storage), route: new(router)}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if err := d.claimPorts(); err != nil {
		return nil, err
	}
	if err := openDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	warnAboutExposure(cfg, log)
	if !affinity.Supported() {
		log.Warn().Msg("CPU pinning is not supported on this platform; shards run unpinned")
	}
	secret, hasher, err := d.openLedger()
	if err != nil {
		return nil, err
	}
	if err := d.openSpool(); err != nil {
		return nil, err
	}
	ctx := context.Background()
	if err := d.establishIdentity(ctx); err != nil {
		return nil, err
	}
	holder := d.inc.Holder()
	d.newExporter(holder)
	if _, err := d.recover(ctx, holder); err != nil {
		return nil, err
	}
	if err := d.bindNode(holder, secret); err != nil {
		return nil, err
	}
	d.newProvisioner()
	// Every target of d.route is set: the plane may run and call them.
	d.node.StartPlane()
	if err := d.prepareFollower(ctx); err != nil {
		return nil, fmt.Errorf("reading the ledger's change log: %w", err)
	}
	accounts, keys, err := d.prov.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the ledger: %w", err)
	}
	d.startBackground()
	if err := d.startAdmin(ctx, hasher); err != nil {
		return nil, err
	}
	if err := d.node.Plane().MarkReady(); err != nil {
		return nil, err
	}
	if err := d.openDataPlane(); err != nil { // clients are refused until now
		return nil, err
	}
	d.openGRPC()
	d.adminAPI.KeepHistory() // its collectors read the shards, which serve now
	if !cfg.Durable {
		log.Warn().Str("ack", "immediate").Msg("answers are sent before their usage is on disk: a crash can lose the last few milliseconds of billed usage")
	}
	ready := log.Info().Int("shards", len(cfg.CPUs)).Str("listen", d.node.Addr()).Str("admin", d.adminAddr)
	if addr := d.GRPCAddr(); addr != "" {
		ready = ready.Str("grpc", addr)
	}
	ready.Int("accounts", accounts).Int("keys", keys).Str("data_dir", cfg.DataDir).Msg("tollgated ready")
	return d, nil
}

// Addr is the data-plane address the shards listen on.
func (d *Daemon) Addr() string { return d.node.Addr() }

// AdminAddr is the address the admin API listens on.
func (d *Daemon) AdminAddr() string { return d.adminAddr }

// Failed delivers the reason the daemon must stop at once, without the
// safe order of Close: another process took its node id (identity.go).
// What was acknowledged is on disk; Close would write to the ledger under
// a name another process now holds.
func (d *Daemon) Failed() <-chan error { return d.failed }

// claimPorts claims the data-plane and admin ports (held until close), and
// refuses addresses another process already serves.
func (d *Daemon) claimPorts() error {
	ports, err := claimAddresses(d.cfg)
	if err != nil {
		return err
	}
	d.ports = ports
	return checkAddresses(d.cfg)
}

// openLedger opens the ledger under the server secret, refusing a secret
// other than the one its keys were issued under, provisions the demo
// account if asked, and returns the hasher of key digests.
func (d *Daemon) openLedger() (secret []byte, _ *credential.Hasher, err error) {
	secret, generated, err := serverSecret(d.cfg, d.log)
	if err != nil {
		return nil, nil, err
	}
	hasher, err := credential.NewHasher(secret)
	if err != nil {
		return nil, nil, err
	}
	if d.store, err = openStore(d.cfg, d.log); err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	if err := matchSecret(ctx, d.store, d.cfg, secret, d.log); err != nil {
		if generated && errors.Is(err, errSecretMismatch) {
			// This start made it, and the ledger is bound to another: a
			// file left behind would only make the next start fail the
			// same way while looking like the data dir's own secret.
			os.Remove(filepath.Join(d.cfg.DataDir, SecretFile))
		}
		return nil, nil, err
	}
	if d.cfg.DemoKey != "" {
		if err := provisionDemo(ctx, d.store, hasher, d.cfg.DemoKey, core.CostUnits(d.cfg.DemoUnits), d.cfg.Clock.Now()); err != nil {
			return nil, nil, err
		}
		d.log.Warn().Msg("demo account \"demo\" provisioned with --demo-key (for trying tollgated, not for production keys)")
	}
	return secret, hasher, nil
}

// bindNode binds the shards and builds the control plane, stopped: the
// plane runs once what it calls exists (Open, d.route).
func (d *Daemon) bindNode(holder string, secret []byte) (err error) {
	t := d.cfg.Transport
	grpcListen, err := d.cfg.GRPC.grpcListen()
	if err != nil {
		return err
	}
	d.node, err = node.Bind(node.Config{
		Listen: d.cfg.Listen, CPUs: d.cfg.CPUs, Secret: secret, MaxReservations: d.cfg.MaxInFlight,
		Loop: httploop.Config{
			MaxHeaderBytes: t.MaxHeaderBytes, MaxBodyBytes: t.MaxBodyBytes, MaxConns: t.MaxConns, MaxOutput: t.MaxOutput,
			IdleTimeout: t.IdleTimeout, HeaderTimeout: t.HeaderTimeout, BodyTimeout: t.BodyTimeout,
		},
		Plane: control.Config{
			Store: d.store, Spool: d.noted, Appended: d.spool.Stats().Appended,
			IsFull: func(err error) bool { return errors.Is(err, spool.ErrFull) },
			Holder: holder, Lease: control.LeaseConfig{TTL: d.cfg.LeaseTTL}, Claims: d.claims,
			FundingChanged: d.route.usageChanged, KeysUsed: d.route.keysUsed,
			Announce: d.announcer(holder),
		},
		Durable: d.cfg.Durable, FundingWait: fundingWait(d.cfg.FundingWait),
		DrainUsage: d.drainUsage, Log: d.log, Storage: d.storage, AuthzKeyHeader: d.cfg.AuthzKeyHeader,
		GRPCListen: grpcListen, Clock: d.cfg.Clock,
	})
	if err != nil {
		return err
	}
	d.route.plane = d.node.Plane()
	return d.serveGRPC(secret)
}

// newProvisioner makes the provisioner that publishes the ledger's state
// to the plane, and routes the plane's and the exporter's news to it.
func (d *Daemon) newProvisioner() {
	p := control.NewProvisioner(d.node.Plane(), d.store)
	p.Now = d.cfg.Clock.Now
	p.Grace = d.cfg.LeaseGrace
	p.EventRetention = d.cfg.EventRetention
	p.OnError = func(err error) {
		d.log.Error().Err(err).Msg("a credential change could not reach the shards; it is in the ledger and loads at the next start")
	}
	d.prov = p
	d.route.prov = p
}

// openSpool opens the usage spool and counts what a previous run left in
// it; the exporter bills that first.
func (d *Daemon) openSpool() error {
	d.noted = &notedSpool{}
	d.route.noted = d.noted
	health := &spoolHealth{log: d.log, dir: filepath.Join(d.cfg.DataDir, SpoolDir), storage: d.storage}
	ev := d.cfg.Events
	s, err := spool.Open(health.dir, spool.Options{OnHealth: health.changed, FlushInterval: groupCommit(d.cfg.GroupCommit),
		OnDurable: d.route.durable, SegmentBytes: ev.SegmentBytes, ArchiveDir: filepath.Join(d.cfg.DataDir, EventsDir),
		ArchiveMaxBytes: ev.MaxBytes, ArchiveMaxAge: ev.MaxAge})
	if err != nil {
		return spoolHint(err, d.cfg.DataDir)
	}
	d.noted.Spool = s
	d.spool = s
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
// incarnation's name: its export mark is kept under it). What it tells and
// asks of the plane goes through d.route: recovery exports before the
// plane exists.
func (d *Daemon) newExporter(holder string) {
	d.nodeID = holder
	d.claims = control.NewPostPaidClaims()
	e := control.NewExporter(d.noted, d.store, holder, exportBatch)
	e.Claims = d.claims
	e.Now = d.cfg.Clock.Now
	e.Floor = d.route.floor
	e.Changed = d.route.usageChanged
	e.OnError = func(err error) {
		d.log.Error().Err(err).Msg("usage export to the ledger failed; retrying (the usage stays in the spool)")
	}
	e.Resume(d.spool.Stats().Released)
	d.exporter = e
	d.route.exporter = e
}

// recover bills what the spool holds and releases the leases holder held
// when it last stopped, before anything serves (control.RecoverWith): a
// node that comes back after kill -9 forfeits nothing.
func (d *Daemon) recover(ctx context.Context, holder string) (control.Recovery, error) {
	cut := d.spool.Dropped().Bytes > 0
	r, err := control.RecoverWith(ctx, d.store, d.spool, d.exporter, control.RecoverOptions{Holder: holder, Now: d.cfg.Clock.Now(), SpoolCut: cut})
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
func (d *Daemon) drainStale(ctx context.Context, id string, spoolInc uint64, cur ledger.Incarnation) error {
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
		uint64(r.Returned+r.RestoredUnits), d.cfg.DataDir)
}

// startBackground starts the exporter, the ledger's maintenance and the
// fleet's followers.
func (d *Daemon) startBackground() {
	d.background = true
	go d.runBackground()
}

// stopBackground stops what startBackground started, if it runs, and
// waits for it to end.
func (d *Daemon) stopBackground() {
	if d.background {
		close(d.stop)
		<-d.done
		d.background = false
	}
}

// runBackground runs the exporter and the ledger's maintenance until stop.
func (d *Daemon) runBackground() {
	defer close(d.done)
	go d.prov.Maintain(d.stop, time.Second)
	defer d.follow(d.stop)()
	go d.pruneEvents(time.Minute)
	d.exporter.Run(d.stop, ExportInterval)
}

// pruneEvents applies the billed-event archive's age bound every interval
// until stop: releases apply both bounds, but an idle node releases nothing.
func (d *Daemon) pruneEvents(interval time.Duration) {
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

// startAdmin serves the admin API on the admin address.
func (d *Daemon) startAdmin(ctx context.Context, hasher *credential.Hasher) error {
	token, generated, err := admin.EnsureAdminToken(ctx, d.store, d.cfg.AdminToken, rand.Reader)
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	if generated {
		// Printed once: only its digest is stored.
		fmt.Fprintf(d.out, "admin token (shown once; set TOLLGATED_ADMIN_TOKEN to choose your own): %s\n", token)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newNodeCollector(d), newBuildInfoCollector(d.cfg.Build),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if d.changeLag != nil {
		reg.MustRegister(d.changeLag, d.changes, d.refreshes)
	}
	// The dashboard's history samples the node's own series alone.
	history := prometheus.NewRegistry()
	history.MustRegister(newNodeCollector(d))
	srv, err := admin.New(admin.Config{Store: d.store, Hasher: hasher, Publisher: d.prov, Registry: reg, Log: d.log,
		Holdings: planeHoldings{d.node.Plane()}, Events: d.spool, Node: d.nodeID, Storage: d.adminStorage, History: history,
		Now: d.cfg.Clock.Now})
	if err != nil {
		return err
	}
	// Keys that expired while the node was down stop before it is ready.
	if err := srv.ExpireKeys(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", d.cfg.Admin)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	if d.admin, err = srv.Serve(ln, d.cfg.AdminLimits); err != nil {
		ln.Close()
		return err
	}
	d.adminAPI = srv
	d.adminAddr = ln.Addr().String()
	return nil
}

// drainUsage makes every billed event durable and bills it into the
// ledger: the shutdown step between ending reservations and releasing
// leases.
func (d *Daemon) drainUsage(deadline time.Time) {
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

// Close stops in the safe order, a documented contract (docs/DESIGN.md):
// the gRPC listener (its calls in flight end while the data plane still
// serves them), the admin API, so no operator change races the drain; then the node,
// which drains requests, ends every reservation, drains usage (durable and
// billed) and releases its leases; then the background work (exporter,
// maintenance, fleet followers); and then close: the spool, the ledger,
// the claim on the node id, and last the ports. Call it once, after Open
// succeeded, and not after Failed delivered.
func (d *Daemon) Close() {
	d.stopGRPC()
	d.adminAPI.StopHistory() // it reads the node, which stops below
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	d.admin.Shutdown(ctx)
	cancel()
	d.node.Shutdown(time.Now().Add(d.cfg.ShutdownGrace))
	d.node = nil
	d.stopBackground()
	st := d.exporter.Stats()
	d.log.Info().Uint64("events", st.Events).Uint64("settlements", st.Settlements).Uint64("units_billed", st.UnitsBilled).
		Uint64("units_rejected", st.UnitsRejected).Uint64("post_paid_accepted", st.PostAccepted).
		Msg("usage exported")
	d.close()
}

// close releases what is open, in the reverse of Open's order; what Open
// never reached is nil and skipped.
func (d *Daemon) close() {
	d.stopGRPC()
	if d.adminAPI != nil {
		d.adminAPI.StopHistory()
	}
	if d.node != nil {
		d.node.Shutdown(time.Now())
	}
	d.stopBackground()
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
// ExportInterval is the exporter's cadence (control.SettleEvery): how long
// billed usage may wait in the spool for its export. A pass settles up to
// exportBatch records a transaction, so a node settles once per interval
// while it bills fewer than exportBatch records an interval, and one
// settlement more per exportBatch records beyond that.
const (
	exportBatch    = 65536
	ExportInterval = control.SettleEvery
)

// fundingWait turns Config.FundingWait into node.Config's: 0 means no
// waiting, which the shard spells NoFundingWait.
func fundingWait(d time.Duration) int64 {
	if d == 0 {
		return shard.NoFundingWait
	}
	return int64(d)
}

// groupCommit turns Config.GroupCommit into spool.Options': 0 means no
// waiting between flushes, which the spool spells negative. With
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
