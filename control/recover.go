package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/invariant"
	"github.com/tollgated/tollgated/ledger"
)

// RecoverSpool is the spool as recovery uses it (spool.Spool).
type RecoverSpool interface {
	Replay(fn func(seq uint64, payload []byte) error) error
	Append(payload []byte) (uint64, error)
	Sync() error
	Durable() uint64
}

// Recovery is what Recover found and did.
type Recovery struct {
	Replayed    int            // records in the spool not yet released
	OpenCommits int            // commit entries no usage record closed: billed at their quote
	OpenUnits   core.CostUnits // what those bills came to
	Leases      int            // this node's active leases released
	Returned    core.CostUnits // units those releases credited back
	Unaccounted int            // leases whose release the ledger refused (left to forfeiture)
	// Holes counts empty records appended because the spool ended before
	// the ledger's export mark (its last records were cut after they were
	// billed): see fillToMark.
	Holes        uint64
	ExportFailed bool
}

// MaxHoles bounds fillToMark: a spool that ends further than this before
// the node's export mark is not this node's spool cut short, but another
// spool (or none) under this node's id, and recovery refuses it.
const MaxHoles = 1 << 20

// fillToMark numbers the spool on up to the node's export mark with empty
// records when it ends before it: its last records were billed, then lost
// (a torn tail cut on open, a quarantine). Without them the records the
// node appends next would take numbers the mark covers, and never be
// billed. The holes bill nothing and are durable before the node serves.
func fillToMark(ctx context.Context, store ledger.Store, sp RecoverSpool, node string) (uint64, error) {
	mark, err := store.ExportMark(ctx, node)
	if err != nil {
		return 0, err
	}
	end := sp.Durable()
	if mark <= end {
		return 0, nil
	}
	if mark-end > MaxHoles {
		return 0, fmt.Errorf("%w: the ledger billed node %q's spool up to record %d, the spool ends at %d", ErrSpoolBehindMark, node, mark, end)
	}
	for range mark - end {
		if _, err := sp.Append(nil); err != nil {
			return 0, err
		}
	}
	return mark - end, sp.Sync()
}

// Recover reconciles, before a node serves, the leases it held when it
// stopped — cleanly or not — from its own spool, so a node that comes
// back forfeits nothing:
//
//  1. every usage record in the spool is billed (the exporter);
//  2. every commit entry no usage record closed — work that started and
//     whose end this node never saw — is billed at its quote, through a
//     usage record spooled and made durable first, so a crash during
//     recovery repeats nothing;
//  3. every lease the ledger says this node (holder) still holds is
//     released with exactly what it has not been billed: Granted − Used.
//
// Leases of a node that never returns are forfeited after expiry + grace
// by the ledger's maintenance (the seed's rule); this is the case where
// the node does return. A lease with no holder (written before leases
// named one) is taken to be this node's: one ledger file served one node.
func Recover(ctx context.Context, store ledger.Store, sp RecoverSpool, ex *Exporter, holder string, now int64) (Recovery, error) {
	var r Recovery
	holes, err := fillToMark(ctx, store, sp, ex.node)
	if err != nil {
		return r, fmt.Errorf("numbering the spool on to the export mark: %w", err)
	}
	r.Holes = holes
	open := make(map[[16]byte]record.Record) // by event id: a commit and its bill share it
	var order [][16]byte
	err = sp.Replay(func(seq uint64, payload []byte) error {
		r.Replayed++
		rec, err := record.Decode(payload)
		if err != nil {
			return fmt.Errorf("spool record %d: %w", seq, err)
		}
		id := rec.Usage.ID
		switch rec.Kind {
		case record.Commit:
			if _, seen := open[id]; !seen {
				order = append(order, id)
			}
			rec.Kind = record.Usage // what it becomes if nothing closes it
			open[id] = rec
		case record.Usage:
			delete(open, id)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if err := ex.Export(ctx); err != nil {
		r.ExportFailed = true
		return r, fmt.Errorf("billing the spool: %w", err)
	}
	var buf []byte
	for _, id := range order {
		rec, ok := open[id]
		if !ok {
			continue
		}
		rec.Usage.OccurredAt = now // it lapsed here: the node never saw it end
		buf = record.Append(buf[:0], &rec)
		if _, err := sp.Append(buf); err != nil {
			return r, fmt.Errorf("spooling an open commit's bill: %w", err)
		}
		r.OpenCommits++
		r.OpenUnits += rec.Usage.Units
	}
	if r.OpenCommits > 0 {
		if err := sp.Sync(); err != nil {
			return r, err
		}
		if err := ex.Export(ctx); err != nil {
			r.ExportFailed = true
			return r, fmt.Errorf("billing open commits: %w", err)
		}
	}
	leases, err := store.Leases(ctx, true)
	if err != nil {
		return r, err
	}
	for _, l := range leases {
		if l.Holder != holder && l.Holder != "" {
			continue
		}
		unspent := l.Granted - min(l.Used, l.Granted)
		err := store.Release(ctx, l.ID, l.Token, unspent, now)
		switch {
		case err == nil:
			r.Leases++
			r.Returned += unspent
		case errors.Is(err, ledger.ErrLeaseNotActive):
			// Forfeited meanwhile by maintenance (another process, or a
			// node down past expiry + grace): nothing to return.
		default:
			r.Unaccounted++
			invariant.Violated(invariant.RecoveryMismatch, fmt.Sprintf("releasing lease %d of %s: %v", l.ID, l.Account, err))
		}
	}
	return r, nil
}
