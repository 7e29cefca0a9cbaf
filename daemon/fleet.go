//go:build linux

package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/fleet"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// On a PostgreSQL ledger a node follows the change log, so admin changes
// made through any node reach this node's shards, and the funds
// announcements, so spending through any node moves this node's funding
// evidence (package fleet). The
// embedded ledger has one node: there is nothing to follow.

// prepareFollower takes the change log's head, before the node loads the
// ledger (so nothing committed after the load is missed), and builds the
// follower; on the embedded ledger it does nothing.
func (d *Daemon) prepareFollower(ctx context.Context) error {
	pg, ok := d.store.(*pgstore.Store)
	if !ok {
		return nil
	}
	head, err := pg.LastChange(ctx)
	if err != nil {
		return err
	}
	d.followFrom = head
	d.changeLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tollgated_fleet_change_lag_seconds",
		Help: "From an admin change's commit (any node's) to its publication on this node's shards.",
		// The bound the fleet holds is 100 ms at p99 (docs/FLEET.md).
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	})
	d.changes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgated_fleet_changes_total",
		Help: "Changes of the fleet's change log this node applied, by how it learned of them: \"heard\" (a notification, or a (re)connection) or \"polled\" (its periodic read found one unannounced: notifications are being lost).",
	}, []string{"learned"})
	d.follower = &fleet.Follower{Store: d.store, Source: pg, Publish: d.prov, Now: d.cfg.Clock.Time,
		Applied: func(c pgstore.Change, lag time.Duration) {
			d.changeLag.Observe(lag.Seconds())
			d.changes.WithLabelValues(learnedBy(c)).Inc()
		},
		OnError: func(c pgstore.Change, err error) {
			d.log.Error().Err(err).Uint64("change", c.ID).Str("kind", string(c.Kind)).Str("account", string(c.Account)).
				Msg("a change another node made could not reach this node's shards; retrying")
		}}
	d.refreshes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgated_fleet_funding_refreshes_total",
		Help: "Funding evidence this node read again after funds announcements: kind \"named\" (the announced accounts' subtrees) or \"all\" (after a reconnection), result \"ok\" or \"failed\" (retried).",
	}, []string{"kind", "result"})
	d.funds = &fleet.Funds{Source: pg, Refresh: d.prov,
		Refreshed: func(_ int, all bool) { d.refreshes.WithLabelValues(refreshKind(all), "ok").Inc() },
		OnError: func(all bool, err error) {
			d.refreshes.WithLabelValues(refreshKind(all), "failed").Inc()
			d.log.Error().Err(err).Bool("all", all).Msg("funding moved by usage on the fleet could not reach this node's shards; retrying")
		}}
	return nil
}

// learnedBy is the learned label of a change applied.
func learnedBy(c pgstore.Change) string {
	if c.Heard {
		return "heard"
	}
	return "polled"
}

// announcer is what the plane announces to the other nodes of a fleet
// through, on PostgreSQL (nil on the embedded ledger: one node, no one to
// tell). Each announcement is bounded by a second: it is a hint.
func (d *Daemon) announcer(holder string) func(plane.Announcement) {
	pg, ok := d.store.(*pgstore.Store)
	if !ok {
		return nil
	}
	d.announce = &fleet.Announcements{Source: pg, Holder: holder, Plane: d.route,
		OnError: func(err error) { d.log.Warn().Err(err).Msg("an announcement to the fleet could not be sent") }}
	return func(a plane.Announcement) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		d.announce.Send(ctx, a)
	}
}

// follow runs the follower of the change log and of the funds
// announcements until stop closes, and returns a function that
// waits for it to end.
func (d *Daemon) follow(stop <-chan struct{}) (wait func()) {
	if d.follower == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var running sync.WaitGroup
	running.Go(func() { d.follower.Run(ctx, d.followFrom) })
	running.Go(func() { d.funds.Run(ctx) })
	if d.announce != nil {
		running.Go(func() { d.announce.Run(ctx) })
	}
	go func() {
		defer close(done)
		running.Wait()
	}()
	go func() {
		select {
		case <-stop:
		case <-done:
		}
		cancel()
	}()
	d.log.Info().Uint64("after_change", d.followFrom).Msg("following the ledger's change log")
	return func() { <-done }
}

func refreshKind(all bool) string {
	if all {
		return "all"
	}
	return "named"
}
