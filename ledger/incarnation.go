package ledger

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Incarnation is one life of a node id. A node keeps its incarnation for as
// long as it keeps its data directory: a restart on it, after SIGTERM or
// kill -9, is the same incarnation, which bills its spool and releases its
// own leases. A start under a known id on an empty data directory (a lost
// volume; on Kubernetes the pod name is the id) is a new incarnation: the
// leases and the export mark of the one before it are not its own, so it
// can neither release nor credit them (they are forfeited after their
// expiry and their own grace), nor take spool positions that incarnation's
// mark covers for its own.
type Incarnation struct {
	Node   string // the node id (--node-id)
	Number uint64 // 1 for the id's first life, one more for each start on an empty data directory
	// Grace is the incarnation's --lease-grace: the leases it acquires are
	// forfeited Grace after their expiry, whichever node reclaims them.
	Grace     int64
	StartedAt int64 // the last start of this incarnation
}

// HolderSeparator joins a node id and an incarnation number in a holder
// name. Node ids never contain it (letters, digits, '-', '_', '.').
const HolderSeparator = "#"

// Holder is the name the incarnation's leases (Lease.Holder), its export
// mark and its billed-event stream are kept under: the node id for the
// first incarnation — so the leases and marks written before incarnations
// existed stay with the life that wrote them — and "id#n" for the n-th.
func (i Incarnation) Holder() string { return HolderOf(i.Node, i.Number) }

// HolderOf is Incarnation{Node: node, Number: n}.Holder().
func HolderOf(node string, n uint64) string {
	if n <= 1 {
		return node
	}
	return node + HolderSeparator + strconv.FormatUint(n, 10)
}

// ParseHolder splits a holder name into its node id and incarnation number
// (1 for a bare node id).
func ParseHolder(holder string) (node string, n uint64) {
	node, num, found := strings.Cut(holder, HolderSeparator)
	if !found {
		return holder, 1
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n < 2 {
		return holder, 1 // not a name HolderOf makes: a node id of its own
	}
	return node, n
}

// NoGrace is Lease.Grace for a lease whose holder registered no grace (no
// Incarnate, or a lease granted before leases kept one): Reclaim's own
// grace applies to it.
const NoGrace int64 = -1

// MaxGrace bounds an incarnation's grace.
const MaxGrace = int64(24 * time.Hour)

// Errors of Incarnate. Both come as an *IncarnationError naming what the
// ledger holds.
var (
	// ErrStaleIncarnation: the data directory belongs to an incarnation
	// the ledger has since replaced (the node was started again under its
	// id on an empty data directory).
	ErrStaleIncarnation = errors.New("ledger: the data directory belongs to an earlier incarnation of its node")
	// ErrUnknownIncarnation: the data directory names an incarnation the
	// ledger never recorded (a ledger restored from a backup older than
	// the data directory, or another ledger's data directory).
	ErrUnknownIncarnation = errors.New("ledger: the data directory belongs to an incarnation this ledger never recorded")
)

// IncarnationError is Incarnate's refusal: the data directory's spool
// belongs to incarnation Spool of the node, the ledger's current one is
// Current (Number 0 when the ledger does not know the node).
type IncarnationError struct {
	Spool   uint64
	Current Incarnation
	Err     error // ErrStaleIncarnation or ErrUnknownIncarnation
}

func (e *IncarnationError) Error() string {
	return fmt.Sprintf("%v: node %q, the data directory's incarnation %d, the ledger's %d", e.Err, e.Current.Node, e.Spool, e.Current.Number)
}

func (e *IncarnationError) Unwrap() error { return e.Err }

// ValidateIncarnate refuses arguments no Incarnate accepts (ErrInvalid).
func ValidateIncarnate(node string, grace int64) error {
	if node == "" || strings.Contains(node, HolderSeparator) || len(node) > 256 {
		return fmt.Errorf("%w: node id %q", ErrInvalid, node)
	}
	if grace < 0 || grace > MaxGrace {
		return fmt.Errorf("%w: grace %d", ErrInvalid, grace)
	}
	return nil
}

// Incarnate decides a start of node whose data directory's spool belongs
// to incarnation spool (0: an empty data directory), given the ledger's
// record of node (known false if none), and returns the record to store.
// The rules, the same for every backend:
//
//   - an unknown node starts as incarnation 1 (spool 0 or 1);
//   - spool equal to the current incarnation is that incarnation again;
//   - spool 0 under a known node is a new incarnation, one more;
//   - an older spool is ErrStaleIncarnation, a newer one, or any spool
//     above 1 of an unknown node, ErrUnknownIncarnation.
//
// The record takes the start's time and grace either way.
func Incarnate(cur Incarnation, known bool, node string, spool uint64, grace, now int64) (Incarnation, error) {
	if err := ValidateIncarnate(node, grace); err != nil {
		return Incarnation{}, err
	}
	next := Incarnation{Node: node, Number: 1, Grace: grace, StartedAt: now}
	switch {
	case !known && spool <= 1:
	case !known:
		return Incarnation{}, &IncarnationError{Spool: spool, Current: Incarnation{Node: node}, Err: ErrUnknownIncarnation}
	case spool == cur.Number:
		next.Number = cur.Number
	case spool == 0:
		next.Number = cur.Number + 1
	case spool < cur.Number:
		return Incarnation{}, &IncarnationError{Spool: spool, Current: cur, Err: ErrStaleIncarnation}
	default:
		return Incarnation{}, &IncarnationError{Spool: spool, Current: cur, Err: ErrUnknownIncarnation}
	}
	return next, nil
}

// GraceOf is the grace a lease granted to holder takes, given the ledger's
// record of the holder's node (known false if none): the incarnation's,
// if holder is its current incarnation; NoGrace otherwise.
func GraceOf(holder string, cur Incarnation, known bool) int64 {
	_, n := ParseHolder(holder)
	if !known || n != cur.Number {
		return NoGrace
	}
	return cur.Grace
}

// ReclaimableAt is when lease l may be forfeited, with grace the
// reclaimer's for a lease that keeps none; ok is false when that time is
// past the end of time (never).
func ReclaimableAt(l *Lease, grace int64) (at int64, ok bool) {
	if l.Grace != NoGrace {
		grace = l.Grace
	}
	if grace < 0 || l.ExpiresAt > (1<<63-1)-grace {
		return 0, false
	}
	return l.ExpiresAt + grace, true
}
