//go:build linux

package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/invariant"
	"github.com/tollgated/tollgated/node"
	"github.com/tollgated/tollgated/shard"
	"github.com/tollgated/tollgated/spool"
)

// nodeCollector exposes the data plane, the control plane, the spool and
// the exporter to Prometheus. Everything is read at scrape time from what
// each part publishes; nothing on the request path counts for it.
type nodeCollector struct{ d *Daemon }

func newNodeCollector(d *Daemon) prometheus.Collector { return nodeCollector{d} }

var (
	descAdmitted    = desc("admitted_total", "Requests admitted, per shard.", "shard")
	descDenials     = desc("denials_total", "Requests denied, by reason (one series per reason).", "reason")
	descOutcomes    = desc("reservations_total", "Admitted reservations by how they ended.", "outcome")
	descBilled      = desc("units_billed_total", "Cost units billed by the shards.")
	descRequests    = desc("http_requests_total", "HTTP requests handled, per shard.", "shard")
	descConns       = desc("http_connections", "Open data-plane connections, per shard.", "shard")
	descInFlight    = desc("reservations_in_flight", "Reservations held now, per shard.", "shard")
	descParked      = desc("answers_waiting_for_durability", "Answers held until their usage is on disk, per shard.", "shard")
	descWaiting     = desc("requests_waiting_for_funding", "Requests waiting for their shard's next lease slice, per shard.", "shard")
	descWaits       = desc("funding_waits_total", "Requests that waited for funding, by how the wait ended: expired (still refused at the deadline), full (no room to wait: refused at once), abandoned (the client left first: dropped unbilled), or waited (all that waited).", "outcome")
	descRing        = desc("ring_depth", "Messages waiting in a ring, per shard and direction.", "shard", "direction")
	descLeases      = desc("lease_operations_total", "Ledger lease operations by the control plane.", "operation")
	descUsage       = desc("usage_exported_total", "Usage records exported to the ledger: data-plane records folded into settlements, post-paid events by the ledger's verdict.", "result")
	descSettlements = desc("ledger_settlements_total", "Ledger transactions that billed the data plane's usage (one per export batch, not per request).")
	descSettled     = desc("units_settled_total", "Units the exporter's settlements billed, and lease usage the ledger rejected (beyond what its lease could take).", "result")
	descSpooled     = desc("usage_spooled_total", "Usage events appended to the spool.")
	descSpoolLag    = desc("spool_lag_events", "Spooled usage events not yet exported to the ledger.")
	descSpoolBytes  = desc("spool_pending_bytes", "Spooled bytes not yet on disk.")
	descDroppedRec  = desc("spool_recovery_dropped_records_total", "Records the spool lost from its end when it opened: those a cut torn or damaged tail held, as far as its bytes show them or the ledger's export mark proves they existed, or those the spool was numbered on past (docs/RUNBOOK.md).")
	descOpenCommits = desc("open_commits", "Committed reservations whose end the spool has not seen yet: billed at their quote if the node dies.")
	descSpoolSyncs  = desc("spool_syncs_total", "fdatasync calls of the usage spool for its records (one per group commit).")
	descSpoolGrows  = desc("spool_grow_syncs_total", "fdatasync calls of the usage spool after growing its segment with zeros (one per 1 MiB of records), beside tollgated_spool_syncs_total.")
	descSpoolSyncS  = desc("spool_sync_seconds_total", "Time the usage spool spent in fdatasync: divided by tollgated_spool_syncs_total, the mean; durable answers wait for it.")
	descSpoolSyncM  = desc("spool_sync_max_seconds", "The longest fdatasync of the usage spool since start: a durable answer waits past 5 s (504 answer-timeout) only if the disk stalls this long.")
	descSpoolBroken = desc("spool_broken", "1 once the spool failed a write or sync: nothing more becomes durable, requests that bill are refused 503 storage-failed until a restart.")
	descSpoolFull   = desc("spool_storage_full", "1 while the spool's filesystem has no room for its next step of records: requests that bill are refused 503 storage-full (tollgated_denials_total{reason=\"storage-full\"}) until it has room again.")
	descSpoolFulls  = desc("spool_storage_full_total", "Times the spool's filesystem ran out of room (tollgated_spool_storage_full went to 1).")
	descInvariants  = desc("invariant_violations_total", "Broken invariants by kind: each is a bug, logged as an error when it happens.", "kind")
	descDroppedB    = desc("spool_recovery_dropped_bytes_total", "Bytes the spool cut from a torn or damaged tail when it opened.")
	descArchiveB    = desc("event_archive_bytes", "Bytes of billed events kept for GET /v1/events after they were billed (--event-archive-bytes bounds it).")
	descArchivePrun = desc("event_archive_pruned_segments_total", "Spool segments the billed-event archive dropped (its bounds, or a spool rebuilt beneath it): a consumer behind them gets 410 cursor-expired.")
	descLatency     = desc("request_duration_seconds", "Data-plane answers by route: from the shard loop's wake-up that read the request to its answer being ready (after durability, funding waits and forwarding).", "route")
	descUntimed     = desc("request_duration_untimed_total", "Postponed data-plane answers left out of tollgated_request_duration_seconds because their timing slot was reused first.")

	descGRPCHeld      = desc("grpc_held", "gRPC calls the shards hold now, waiting for the disk, funding or an account's key (at most --grpc-max-held per shard).")
	descGRPCAbandoned = desc("grpc_abandoned_total", "Held gRPC calls whose stream ended before the answer (the client reset it or closed its connection, as at a gateway's timeout): nothing more is decided for the call; a descriptor still waiting for funding or its account's key is not billed, as an HTTP request whose client left (descriptors decided before, and a decision waiting only for the disk, stay billed).")
	descGRPCRefused   = desc("grpc_refused_total", "gRPC calls given no decision, by reason: busy (the shard held --grpc-max-held calls: RESOURCE_EXHAUSTED, nothing decided), no_answer (held past the answer timeout: answered as a 504 answer-timeout, outcome unknown).", "reason")

	descInternal = desc("internal_errors_total", "Requests answered 500 internal: a panic recovered while decoding one (the first per shard is logged with its stack). Anything but 0 is a bug.")
	// The platform routes (seed 000). An agent admits on every answer
	// that is not a 200 decision, so the refusals are what to alert on.
	descPlatformDecisions = desc("platform_admission_decisions_total", "GET /v1/admission decisions (200 answers), by decision and reason (reason \"none\" for an admit).", "decision", "reason")
	descPlatformUnauth    = desc("platform_unauthorized_total", "Platform route calls answered 401 (no valid platform token): the agent failed open.", "route")
	descPlatformBad       = desc("platform_bad_requests_total", "Platform route calls refused as malformed (400, 405, 413): the agent failed open.", "route")
	descPlatformUsage     = desc("platform_usage_events_total", "Post-paid usage events (POST /v1/usage) by the result the reporter was told: accepted, duplicate, rejected (no such agent), failed (not billed now; the batch is retried).", "result")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("tollgated_"+name, help, labels, nil)
}

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	if d.node == nil {
		return
	}
	var denials [core.NumDenyReasons]uint64
	var outcomes [6]uint64
	var billed core.CostUnits
	var waits [4]uint64
	var internal uint64
	var platform shard.PlatformStats
	for i, s := range d.node.ShardStats() {
		shard := strconv.Itoa(i)
		e := &s.Engine
		counter(ch, descAdmitted, float64(e.Admitted), shard)
		gauge(ch, descInFlight, float64(s.InFlight), shard)
		gauge(ch, descParked, float64(s.ParkedAcks), shard)
		gauge(ch, descWaiting, float64(s.FundingWaiting), shard)
		waits[0] += s.FundingWaits
		waits[1] += s.FundingWaitsExpired
		waits[2] += s.FundingWaitsFull
		waits[3] += s.FundingWaitsAbandoned
		for r, n := range e.Denials {
			denials[r] += n
		}
		for j, n := range [...]uint64{e.Finished, e.Lapsed, e.Cancelled, e.Shed, e.RefusedAtStart, e.CommitRefusals} {
			outcomes[j] += n
		}
		billed += e.UnitsBilled
		internal += s.InternalErrors
		platform.Add(&s.Platform)
	}
	for r := core.DenyReason(1); int(r) < core.NumDenyReasons; r++ {
		counter(ch, descDenials, float64(denials[r]), r.Code())
	}
	for j, name := range [...]string{"finished", "lapsed", "cancelled", "shed", "refused_at_start", "commit_refused"} {
		counter(ch, descOutcomes, float64(outcomes[j]), name)
	}
	counter(ch, descBilled, float64(billed))
	for j, name := range [...]string{"waited", "expired", "full", "abandoned"} {
		counter(ch, descWaits, float64(waits[j]), name)
	}
	counter(ch, descInternal, float64(internal))
	collectPlatform(ch, &platform)
	if d.cfg.GRPC.Enabled() {
		g := &d.grpcStats
		gauge(ch, descGRPCHeld, float64(g.Held.Load()))
		for _, r := range []struct {
			name string
			n    uint64
		}{{"busy", g.Busy.Load()}, {"no_answer", g.NoAnswer.Load()}} {
			counter(ch, descGRPCRefused, float64(r.n), r.name)
		}
		counter(ch, descGRPCAbandoned, float64(g.Abandoned.Load()))
	}
	collectLatency(ch, d.node)
	for i, s := range d.node.Stats() {
		counter(ch, descRequests, float64(s.Requests), strconv.Itoa(i))
		gauge(ch, descConns, float64(s.Conns), strconv.Itoa(i))
	}
	r := d.node.Plane().Report()
	for i := range r.RingIn {
		gauge(ch, descRing, float64(r.RingIn[i]+r.Queued[i]), strconv.Itoa(i), "to_shard")
		gauge(ch, descRing, float64(r.RingOut[i]), strconv.Itoa(i), "to_plane")
	}
	f := r.Funding
	for _, op := range []struct {
		name string
		n    uint64
	}{{"acquired", f.Acquired}, {"extended", f.Extended}, {"released", f.Released}, {"refused", f.Refused},
		{"error", f.Errors}, {"handed_back", f.HandedBack}, {"sibling_handed_back", f.SiblingsHandedBack}, {"rotated", f.Rotated}} {
		counter(ch, descLeases, float64(op.n), op.name)
	}
	ex := d.exporter.Stats()
	counter(ch, descUsage, float64(ex.Events), "data_plane")
	counter(ch, descUsage, float64(ex.PostAccepted), "post_paid_accepted")
	counter(ch, descUsage, float64(ex.PostDuplicate), "post_paid_duplicate")
	counter(ch, descUsage, float64(ex.PostRejected), "post_paid_rejected")
	counter(ch, descSettlements, float64(ex.Settlements))
	counter(ch, descSettled, float64(ex.UnitsBilled), "billed")
	counter(ch, descSettled, float64(ex.UnitsRejected), "rejected")
	sp := d.spool.Stats()
	counter(ch, descSpooled, float64(r.Durability.Appended))
	gauge(ch, descOpenCommits, float64(r.Durability.OpenCommits))
	gauge(ch, descSpoolBroken, boolGauge(r.SpoolBroken || sp.Health == spool.Broken))
	gauge(ch, descSpoolFull, boolGauge(sp.Health == spool.NoSpace))
	counter(ch, descSpoolFulls, float64(sp.NoSpace))
	for _, k := range invariant.Kinds() {
		counter(ch, descInvariants, float64(invariant.Count(k)), k.String())
	}
	gauge(ch, descSpoolLag, float64(sp.Appended-min(sp.Appended, ex.Exported)))
	gauge(ch, descSpoolBytes, float64(sp.PendingBytes))
	counter(ch, descSpoolSyncs, float64(sp.Syncs))
	counter(ch, descSpoolGrows, float64(sp.Grows))
	counter(ch, descSpoolSyncS, sp.SyncTotal.Seconds())
	gauge(ch, descSpoolSyncM, sp.SyncMax.Seconds())
	counter(ch, descDroppedRec, float64(d.droppedRecords))
	counter(ch, descDroppedB, float64(sp.Truncated))
	gauge(ch, descArchiveB, float64(sp.ArchiveBytes))
	counter(ch, descArchivePrun, float64(sp.Pruned))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectPlatform exports the platform routes' counters, summed over the
// shards.
func collectPlatform(ch chan<- prometheus.Metric, p *shard.PlatformStats) {
	for r := shard.AdmissionReason(0); r < shard.NumAdmissionReasons; r++ {
		decision, reason := "deny", r.String()
		if r == shard.AdmissionAdmit {
			decision, reason = "admit", "none"
		}
		counter(ch, descPlatformDecisions, float64(p.Decisions[r]), decision, reason)
	}
	for i, route := range shard.PlatformRoutes {
		counter(ch, descPlatformUnauth, float64(p.Unauthorized[i]), route)
		counter(ch, descPlatformBad, float64(p.BadRequests[i]), route)
	}
	for i, result := range shard.UsageResults {
		counter(ch, descPlatformUsage, float64(p.Usage[i]), result)
	}
}

// latencyBuckets are the shards' bucket bounds in seconds.
var latencyBuckets = func() []float64 {
	b := make([]float64, len(shard.LatencyBounds))
	for i, d := range shard.LatencyBounds {
		b[i] = d.Seconds()
	}
	return b
}()

// collectLatency exports the shards' latency histograms, summed, as
// tollgated_request_duration_seconds{route}.
func collectLatency(ch chan<- prometheus.Metric, n *node.Node) {
	lat, untimed := n.Latency()
	for r := range lat {
		h := &lat[r]
		cumulative := make(map[float64]uint64, len(latencyBuckets))
		var n uint64
		for i, le := range latencyBuckets {
			n += h.Counts[i]
			cumulative[le] = n
		}
		ch <- prometheus.MustNewConstHistogram(descLatency, h.Count(), float64(h.SumNs)/1e9, cumulative, shard.RouteNames[r])
	}
	counter(ch, descUntimed, float64(untimed))
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// buildInfoCollector is tollgated_build_info{version,revision,goversion} 1,
// the usual way to put a binary's build in every dashboard.
type buildInfoCollector struct{ m prometheus.Metric }

var descBuildInfo = desc("build_info", "The build of this tollgated: always 1, with its version, VCS revision and Go version as labels.",
	"version", "revision", "goversion")

func newBuildInfoCollector(b Build) prometheus.Collector {
	return buildInfoCollector{prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, b.Version, b.Revision, b.GoVersion)}
}

func (c buildInfoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descBuildInfo }
func (c buildInfoCollector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }
