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
	// Mark is the ledger's export mark of this node when recovery began:
	// the spool position it had billed up to.
	Mark        uint64
	Replayed    int            // records in the spool not yet released
	OpenCommits int            // commit entries no usage record closed: billed at their quote
	OpenUnits   core.CostUnits // what those bills came to
	// Unresolved and UnresolvedUnits: commit entries no surviving record
	// closed, journaled before a record the ledger had billed and the
	// spool lost (a hole at or below the export mark). That record may
	// have been the commit's own bill, so the quote is not billed again
	// (see unresolvedBefore); the lease's remainder is released as usual.
	Unresolved      int
	UnresolvedUnits core.CostUnits
	Leases          int            // this node's active leases released
	Returned        core.CostUnits // units those releases credited back
	// Withheld and WithheldUnits: active leases released with nothing
	// returned, because the spool was cut at open (Options.SpoolCut): the
	// records cut may have been durable and acknowledged (a damaged disk),
	// and what they spent of a lease's remainder no one can tell, so the
	// remainder stays in loss rather than be credited back.
	Withheld      int
	WithheldUnits core.CostUnits
	// Restored and RestoredUnits: leases of this node forfeited while it
	// was away (past their expiry and grace) that its spool, whole,
	// accounts for: released, their unspent units back from loss.
	Restored      int
	RestoredUnits core.CostUnits
	// Forfeited and ForfeitedUnits: forfeited leases left as they are,
	// because the spool was cut at open or numbered on (Options.SpoolCut):
	// records it lost may have spent what their remainder holds.
	Forfeited      int
	ForfeitedUnits core.CostUnits
	Unaccounted    int // leases whose release the ledger refused (left to forfeiture)
	// Holes counts empty records appended because the spool ended before
	// the ledger's export mark (its last records were cut after they were
	// billed): see fillToMark.
	Holes        uint64
	ExportFailed bool
}

// RecoverOptions say how Recover runs.
type RecoverOptions struct {
	// Holder is the name this node's leases and export mark are kept
	// under (ledger.Incarnation.Holder).
	Holder string
	Now    int64
	// SpoolCut says the spool dropped a damaged or torn tail when it
	// opened: it may not hold every record its node acknowledged (a torn
	// write held none, a damaged disk may have lost some, and the spool
	// cannot tell them apart), so no lease's remainder is credited back
	// from it: forfeited leases are not restored, active ones are released
	// with nothing returned.
	SpoolCut bool
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
// It runs after the spool's replay: Replay comes before any Append.
func fillToMark(sp RecoverSpool, node string, mark uint64) (uint64, error) {
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

// Recover is RecoverWith for holder at now, from a spool that opened whole.
func Recover(ctx context.Context, store ledger.Store, sp RecoverSpool, ex *Exporter, holder string, now int64) (Recovery, error) {
	return RecoverWith(ctx, store, sp, ex, RecoverOptions{Holder: holder, Now: now})
}

// RecoverWith reconciles, before a node serves, the leases it held when it
// stopped — cleanly or not — from its own spool, so a node that comes
// back forfeits nothing:
//
//  1. the spool is replayed (before anything is appended to it), and
//     numbered on to the ledger's export mark if it ends before it;
//  2. every usage record in the spool is billed (the exporter);
//  3. every commit entry no usage record closed — work that started and
//     whose end this node never saw — is billed at its quote, through a
//     usage record spooled and made durable first, so a crash during
//     recovery repeats nothing — unless it was journaled before a record
//     the ledger billed and the spool lost, which may have been its bill
//     (unresolvedBefore);
//  4. every lease the ledger says this node (Holder) still holds is
//     released with exactly what it has not been billed: Granted − Used;
//     one forfeited while the node was away is restored the same way
//     (the units come back from loss). A spool cut at open may have lost
//     acknowledged records that spent part of those remainders, so then
//     nothing is returned: they stay in loss, never credited back.
//
// Leases of a node that never returns are forfeited after expiry + grace
// by the ledger's maintenance (the seed's rule); this is the case where
// the node does return. A lease with no holder (written before leases
// named one) is taken to be this node's: one ledger file served one node.
// A new incarnation of the node's id (an empty data directory) holds
// none of its predecessor's leases under its own Holder, so it releases
// and restores nothing of theirs.
func RecoverWith(ctx context.Context, store ledger.Store, sp RecoverSpool, ex *Exporter, o RecoverOptions) (Recovery, error) {
	var r Recovery
	mark, err := store.ExportMark(ctx, ex.node)
	if err != nil {
		return r, err
	}
	r.Mark = mark
	open := make(map[[16]byte]openCommit) // by event id: a commit and its bill share it
	var order [][16]byte
	holes := 0
	var billedLost uint64 // the last record the ledger billed that the spool lost (0: none)
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
			open[id] = openCommit{rec: rec, seq: seq}
		case record.Usage:
			delete(open, id)
		case record.Hole:
			holes++
			if seq <= mark {
				billedLost = seq
			}
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if r.Holes, err = fillToMark(sp, ex.node, mark); err != nil {
		return r, fmt.Errorf("numbering the spool on to the export mark: %w", err)
	}
	if r.Holes > 0 {
		billedLost = mark
	}
	if err := ex.Export(ctx); err != nil {
		r.ExportFailed = true
		return r, fmt.Errorf("billing the spool: %w", err)
	}
	unresolvedBefore(open, order, billedLost, &r)
	if err := billOpenCommits(ctx, sp, ex, open, order, o.Now, &r); err != nil {
		return r, err
	}
	whole := !o.SpoolCut && r.Holes == 0 && holes == 0
	return r, settleLeases(ctx, store, o, whole, &r)
}

// openCommit is a commit entry no replayed record closed, and where the
// spool journaled it.
type openCommit struct {
	rec record.Record // Kind Usage: the bill at its quote
	seq uint64
}

// unresolvedBefore drops from open the commits journaled before billedLost,
// a record the ledger billed and the spool no longer holds (0: none). A
// commit's bill is spooled after its entry, so that record may have been
// it: billed already, and billing the quote as well would bill the work
// twice. Which of them it closed, if any, the spool cannot say, and the
// ledger settles totals without keeping event ids; a commit whose bill
// was lost with the disk is left unbilled, as lost usage records are
// (docs/RUNBOOK.md). Commits journaled after it cannot have been closed
// by a billed record the spool lost, and are billed at their quote.
func unresolvedBefore(open map[[16]byte]openCommit, order [][16]byte, billedLost uint64, r *Recovery) {
	for _, id := range order {
		c, ok := open[id]
		if !ok || c.seq >= billedLost {
			continue
		}
		delete(open, id)
		r.Unresolved++
		r.UnresolvedUnits += c.rec.Usage.Units
	}
}

// billOpenCommits bills, at their quote, the commit entries no usage
// record closed, in the order they were journaled.
func billOpenCommits(ctx context.Context, sp RecoverSpool, ex *Exporter, open map[[16]byte]openCommit, order [][16]byte, now int64, r *Recovery) error {
	var buf []byte
	for _, id := range order {
		c, ok := open[id]
		if !ok {
			continue
		}
		rec := c.rec
		rec.Usage.OccurredAt = now // it lapsed here: the node never saw it end
		buf = record.Append(buf[:0], &rec)
		if _, err := sp.Append(buf); err != nil {
			return fmt.Errorf("spooling an open commit's bill: %w", err)
		}
		r.OpenCommits++
		r.OpenUnits += rec.Usage.Units
	}
	if r.OpenCommits == 0 {
		return nil
	}
	if err := sp.Sync(); err != nil {
		return err
	}
	if err := ex.Export(ctx); err != nil {
		r.ExportFailed = true
		return fmt.Errorf("billing open commits: %w", err)
	}
	return nil
}

// settleLeases releases the node's active leases and, when its spool is
// whole, restores its forfeited ones, each with Granted − Used: the spool
// has been billed, so that is exactly what the node did not spend. From a
// spool cut at open an active lease is released with nothing returned:
// Granted − Used may hold what acknowledged records the cut took spent.
func settleLeases(ctx context.Context, store ledger.Store, o RecoverOptions, whole bool, r *Recovery) error {
	var leases []ledger.Lease
	for _, holder := range []string{o.Holder, ""} {
		held, err := store.LeasesOf(ctx, holder)
		if err != nil {
			return err
		}
		leases = append(leases, held...)
	}
	for _, l := range leases {
		unspent := l.Granted - min(l.Used, l.Granted)
		forfeited := l.State == ledger.LeaseReclaimed
		withheld := !forfeited && o.SpoolCut
		if forfeited && !whole || withheld {
			// Released with nothing returned: the records cut may have
			// spent the remainder. A forfeit stands for good, so that a
			// later start on a spool that opens whole cannot restore what
			// they spent. The remainder stays loss; late usage still
			// settles it.
			unspent = 0
		}
		err := store.Release(ctx, l.ID, l.Token, unspent, o.Now)
		switch {
		case err == nil && forfeited && !whole:
			r.Forfeited++
			r.ForfeitedUnits += l.Granted - min(l.Used, l.Granted)
		case err == nil && withheld:
			r.Withheld++
			r.WithheldUnits += l.Granted - min(l.Used, l.Granted)
		case err == nil && forfeited:
			r.Restored++
			r.RestoredUnits += unspent
		case err == nil:
			r.Leases++
			r.Returned += unspent
		case errors.Is(err, ledger.ErrLeaseNotActive):
			// Released since it was listed: nothing to return.
		default:
			r.Unaccounted++
			invariant.Violated(invariant.RecoveryMismatch, fmt.Sprintf("releasing lease %d of %s: %v", l.ID, l.Account, err))
		}
	}
	return nil
}
