//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// Who a start is. A data directory belongs to one node id and, in the
// ledger, to one incarnation of it (ledger.Incarnation): its spool's owner
// label says which, the embedded ledger records the ids it served, and
// the node-id file (or --node-id) must agree with both, so that a lost or
// replaced node-id file never bills a spool again under another name. A
// start on an empty data directory under an id the ledger knows is a new
// incarnation, which holds none of the leases of the one before it. On
// PostgreSQL a node holds a claim on its id for as long as it runs
// (pgstore.Claim), so a second live process under one id is refused.

// errIdentity marks a start refused because the data directory's identity
// does not add up; the message says the way out.
var errIdentity = control.ErrIdentity

// spoolIdentity is what the opened spool says of its node.
func (d *Daemon) spoolIdentity() (control.SpoolIdentity, error) {
	var si control.SpoolIdentity
	if owner := d.spool.Owner(); owner != "" {
		node, n, err := parseOwner(owner)
		if err != nil {
			return si, err
		}
		si.Node, si.Incarnation = node, n
	}
	si.Used = d.spool.Durable() > 0
	return si, nil
}

// establishIdentity decides this start's node id and incarnation, refusing
// one that does not match the data directory, and records both: the
// node-id file, the incarnation in the ledger, the owner in the spool. A
// data directory of an incarnation the ledger has replaced is stale: its
// spool is billed and its leases settled (drainStale), and the start is
// refused.
func (d *Daemon) establishIdentity(ctx context.Context) error {
	stored, err := storedNodeID(d.cfg)
	if err != nil {
		return err
	}
	id := stored
	if id == "" {
		id = d.cfg.NodeID
	}
	if id != "" {
		if err := validNodeID(id); err != nil {
			return fmt.Errorf("--node-id: %w", err)
		}
	}
	si, err := d.spoolIdentity()
	if err != nil {
		return err
	}
	spoolInc, err := matchSpool(d.cfg, id, si)
	if err != nil {
		return err
	}
	if err := d.matchEmbeddedLedger(ctx, id); err != nil {
		return err
	}
	if id == "" {
		if id, err = newNodeID(); err != nil {
			return err
		}
	}
	if stale, cur, err := d.isStale(ctx, id, spoolInc); err != nil || stale {
		if err != nil {
			return err
		}
		return d.drainStale(ctx, id, spoolInc, cur)
	}
	if err := d.claim(ctx, id); err != nil {
		return err
	}
	inc, err := d.store.Incarnate(ctx, id, spoolInc, int64(d.cfg.LeaseGrace), d.cfg.Clock.Now())
	if err != nil {
		return incarnationHint(err, d.cfg)
	}
	if stored == "" {
		if err := storeNodeID(d.cfg, id); err != nil {
			return fmt.Errorf("storing the node id: %w", err)
		}
	}
	if label := ownerLabel(inc); d.spool.Owner() != label {
		if err := d.spool.SetOwner(label); err != nil {
			return fmt.Errorf("recording the node in the usage spool: %w", err)
		}
	}
	d.inc = inc
	if spoolInc == 0 && inc.Number > 1 {
		d.reportSuperseded(ctx, inc)
	}
	return nil
}

// matchSpool checks the node id against the spool's owner (control.MatchSpool).
func matchSpool(cfg Config, id string, si control.SpoolIdentity) (uint64, error) {
	return control.MatchSpool(cfg.DataDir, SpoolDir, NodeIDFile, id, si)
}

// matchEmbeddedLedger refuses a node id the data directory's own ledger
// file has not served when it has served another: that ledger holds the
// other id's leases and export mark, so under a new id its spool would be
// billed again and its leases forfeited. A PostgreSQL ledger serves a
// fleet: there any id may start.
func (d *Daemon) matchEmbeddedLedger(ctx context.Context, id string) error {
	dataDir := d.cfg.DataDir
	if _, embedded := d.store.(*boltstore.Store); !embedded {
		return nil
	}
	known, err := d.store.Incarnations(ctx)
	if err != nil || len(known) == 0 {
		return err
	}
	if slices.ContainsFunc(known, func(i ledger.Incarnation) bool { return i.Node == id }) {
		return nil
	}
	var ids []string
	for _, i := range known {
		ids = append(ids, i.Node)
	}
	ledgerPath := filepath.Join(dataDir, LedgerFile)
	if id == "" {
		return fmt.Errorf("%w: the ledger %s served node %q, but %s has no node-id file (lost, or restored without it): start with --node-id %s (or restore %s), see docs/RUNBOOK.md",
			errIdentity, ledgerPath, ids[0], dataDir, ids[0], filepath.Join(dataDir, NodeIDFile))
	}
	return fmt.Errorf("%w: the ledger %s served node %q, not %q: start with --node-id %s (docs/RUNBOOK.md)",
		errIdentity, ledgerPath, ids[0], id, ids[0])
}

// isStale reports whether the spool belongs to an incarnation of id the
// ledger has since replaced, and the ledger's current one. Incarnations
// only ever grow, so what this read says cannot be undone by the time the
// spool is drained.
func (d *Daemon) isStale(ctx context.Context, id string, spoolInc uint64) (bool, ledger.Incarnation, error) {
	if spoolInc == 0 {
		return false, ledger.Incarnation{}, nil
	}
	known, err := d.store.Incarnations(ctx)
	if err != nil {
		return false, ledger.Incarnation{}, err
	}
	for _, i := range known {
		if i.Node == id {
			return spoolInc < i.Number, i, nil
		}
	}
	return false, ledger.Incarnation{}, nil
}

// claim takes the node's claim on its id when the ledger is PostgreSQL
// (the embedded ledger's file lock already allows one process). Should
// another process take the id while this one was cut off from the
// database, this one stops (d.failed): two processes would bill under one
// name.
func (d *Daemon) claim(ctx context.Context, id string) error {
	pg, ok := d.store.(*pgstore.Store)
	if !ok {
		return nil
	}
	c, err := pg.Claim(ctx, id, func(err error) {
		select {
		case d.failed <- fmt.Errorf("another process holds node id %q: it was started under this node's id while this one was cut off from the ledger; stopping, so that one process bills under the id (%w)", id, err):
		default:
		}
	})
	if errors.Is(err, pgstore.ErrNodeLive) {
		return fmt.Errorf("%w: node %q is live: another tollgated holds its id (a twin on a copy of its data directory, or a second node given the same --node-id). "+
			"Give each node its own id; to replace a node, stop the old one first (docs/RUNBOOK.md)", errIdentity, id)
	}
	if err != nil {
		return err
	}
	d.claimed = c
	return nil
}

// incarnationHint adds the way out to a refused incarnation.
func incarnationHint(err error, cfg Config) error {
	ie, ok := errors.AsType[*ledger.IncarnationError](err)
	if !ok || !errors.Is(err, ledger.ErrUnknownIncarnation) {
		return err
	}
	return fmt.Errorf("%w: the usage spool in %s is incarnation %d of node %q, which this ledger never recorded (it is at %d): "+
		"the ledger was restored from a backup older than the data directory, or the data directory is another ledger's (docs/RUNBOOK.md)",
		errIdentity, filepath.Join(cfg.DataDir, SpoolDir), ie.Spool, ie.Current.Node, ie.Current.Number)
}

// reportSuperseded says, once, what starting a new incarnation cost: the
// incarnation before it lost its data directory, and with it the usage its
// spool held and had not billed; its leases are not this one's to release.
func (d *Daemon) reportSuperseded(ctx context.Context, inc ledger.Incarnation) {
	prev := ledger.HolderOf(inc.Node, inc.Number-1)
	leases, err := d.store.LeasesOf(ctx, prev)
	mark, merr := d.store.ExportMark(ctx, prev)
	if err = errors.Join(err, merr); err != nil {
		d.log.Error().Err(err).Str("previous", prev).Msg("started a new incarnation; could not read what the previous one holds")
		return
	}
	var active int
	var held uint64
	var forfeitBy int64
	for _, l := range leases {
		if l.State != ledger.LeaseActive {
			continue
		}
		active++
		held += uint64(l.Granted - min(l.Used, l.Granted))
		if at, ok := ledger.ReclaimableAt(&l, int64(d.cfg.LeaseGrace)); ok {
			forfeitBy = max(forfeitBy, at)
		}
	}
	ev := d.log.Warn().Str("node_id", inc.Node).Uint64("incarnation", inc.Number).Str("previous", prev).
		Uint64("previous_export_mark", mark).Int("previous_leases", active).Uint64("previous_units_held", held)
	if forfeitBy > 0 {
		ev = ev.Time("forfeited_by", time.Unix(0, forfeitBy).UTC())
	}
	ev.Msg("node started on an empty data directory under an id the ledger knows: this is a new incarnation. " +
		"The previous incarnation's usage not yet billed was in its data directory; its leases are not released or credited: " +
		"the units they hold (previous_units_held) are forfeited as loss after their expiry and their own grace (forfeited_by). " +
		"If that data directory comes back, start it once on its own: it bills its spool against them (docs/RUNBOOK.md)")
}
