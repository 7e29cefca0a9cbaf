// Package record is the format of the control plane's records in the usage
// spool: billed usage, and the commit journal's entries.
package record

import (
	"encoding/binary"
	"errors"

	"github.com/tollgated/tollgated/core"
)

// A record keeps one event in the spool: fixed-width little-endian fields,
// the policy revision when known, then the account id.
//
//	kind u8 | source u8 | id [16] | lease u64 | token u64 | units u64 |
//	occurred_at i64 | [revision [32]] | [event_id_len u8 | event_id] |
//	account_len u8 | account [account_len]
//
// The kind byte's low nibble is the Kind; withRevision (0x10) says a
// revision follows (records written before revisions were kept have none),
// withEventID (0x20) that a post-paid report's own event id follows (id is
// derived from it; records written before it was kept have none).
//
// Kind Usage is billed usage. Kind Commit is a commit journal entry: the
// reservation's request id, the lease funding it and its quote (units);
// the usage record with the same id closes it, and one still open when a
// node restarts is billed at its quote.
const (
	fixedLen     = 1 + 1 + 16 + 8 + 8 + 8 + 8 + 1
	withRevision = 0x10
	withEventID  = 0x20
	flags        = withRevision | withEventID
	// MaxEventIDLen bounds a post-paid report's event id.
	MaxEventIDLen = 128
	// MaxLen bounds one encoded record.
	MaxLen = fixedLen + len(core.PolicyRevision{}) + 1 + MaxEventIDLen + core.MaxAccountIDLen
)

// Kind says what a record is.
type Kind uint8

const (
	Usage  Kind = 1
	Commit Kind = 2
	// Hole is an empty record: the place of a record lost to damage,
	// which spool.Quarantine keeps so every other record keeps its
	// sequence number. It bills nothing.
	Hole Kind = 0
)

// Source says what funded an event. Its values are the ledger's usage
// sources (control checks that they agree), so a record's source byte is
// the ledger's.
type Source uint8

const (
	SourceLease    Source = iota + 1 // a lease: LeaseID and Token name it
	SourceOverage                    // elastic overage beyond the lease
	SourcePostPaid                   // reported after the fact (POST /v1/usage)
)

// Event is a billed event as the spool keeps it: the fields of the
// ledger's usage row, which the control plane's shell fills from it.
type Event struct {
	ID         [16]byte
	Account    core.AccountID
	Source     Source
	LeaseID    uint64
	Token      uint64
	Units      core.CostUnits
	OccurredAt int64
}

// Record is one spool record.
type Record struct {
	Kind  Kind
	Usage Event
	// Revision is the policy revision the request was admitted under:
	// zero for post-paid reports, and for records written without one.
	Revision core.PolicyRevision
	// EventID is a post-paid report's id as its reporter sent it (Usage.ID
	// is derived from it); empty for data-plane events, and for records
	// written without one.
	EventID string
}

var errBad = errors.New("record: malformed spool record")

// Append encodes r after dst; a Hole is the empty record.
func Append(dst []byte, r *Record) []byte {
	if r.Kind == Hole {
		return dst
	}
	u := &r.Usage
	kind := byte(r.Kind)
	hasRev := r.Revision != (core.PolicyRevision{})
	if hasRev {
		kind |= withRevision
	}
	if r.EventID != "" {
		kind |= withEventID
	}
	dst = append(dst, kind, byte(u.Source))
	dst = append(dst, u.ID[:]...)
	dst = binary.LittleEndian.AppendUint64(dst, u.LeaseID)
	dst = binary.LittleEndian.AppendUint64(dst, u.Token)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(u.Units))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(u.OccurredAt))
	if hasRev {
		dst = append(dst, r.Revision[:]...)
	}
	if r.EventID != "" {
		if len(r.EventID) > MaxEventIDLen {
			panic("record: invariant broken: a post-paid event id longer than MaxEventIDLen")
		}
		dst = append(dst, byte(len(r.EventID)))
		dst = append(dst, r.EventID...)
	}
	dst = append(dst, byte(len(u.Account)))
	return append(dst, u.Account...)
}

// Decode is Append's inverse.
func Decode(b []byte) (Record, error) {
	var r Record
	if len(b) == 0 {
		return r, nil // a Hole
	}
	if len(b) < fixedLen {
		return r, errBad
	}
	r.Kind = Kind(b[0] &^ flags)
	hasRev, hasEventID := b[0]&withRevision != 0, b[0]&withEventID != 0
	if (r.Kind != Usage && r.Kind != Commit) || b[0]&^(flags|0x0f) != 0 {
		return r, errBad
	}
	u := &r.Usage
	u.Source = Source(b[1])
	copy(u.ID[:], b[2:18])
	u.LeaseID = binary.LittleEndian.Uint64(b[18:])
	u.Token = binary.LittleEndian.Uint64(b[26:])
	u.Units = core.CostUnits(binary.LittleEndian.Uint64(b[34:]))
	u.OccurredAt = int64(binary.LittleEndian.Uint64(b[42:]))
	rest := b[fixedLen-1:]
	if hasRev {
		if len(rest) < len(r.Revision)+1 {
			return r, errBad
		}
		copy(r.Revision[:], rest)
		rest = rest[len(r.Revision):]
		if r.Revision == (core.PolicyRevision{}) {
			return r, errBad // written only when known: a zero one is damage
		}
	}
	if hasEventID {
		n := int(rest[0])
		if n == 0 || n > MaxEventIDLen || len(rest) < 1+n+1 {
			return r, errBad
		}
		r.EventID = string(rest[1 : 1+n])
		rest = rest[1+n:]
	}
	n := int(rest[0])
	if len(rest) != 1+n || n == 0 || n > core.MaxAccountIDLen {
		return r, errBad
	}
	u.Account = core.AccountID(rest[1:])
	if u.Source < SourceLease || u.Source > SourcePostPaid || (r.Kind == Commit && u.Source == SourcePostPaid) ||
		(hasEventID && u.Source != SourcePostPaid) {
		return r, errBad
	}
	return r, nil
}

// FromEvent is the record of a billed event (or a commit) from a shard,
// funded by lease leaseID when it was funded by a lease.
func FromEvent(k Kind, ev *core.UsageEvent, leaseID uint64) Record {
	r := Record{Kind: k, Revision: *ev.Revision()}
	u := &r.Usage
	u.Account, u.Units, u.OccurredAt = ev.Account(), ev.Units, ev.OccurredAt
	binary.BigEndian.PutUint64(u.ID[:8], ev.RequestID.Hi)
	binary.BigEndian.PutUint64(u.ID[8:], ev.RequestID.Lo)
	if ev.Source == core.SourceLease {
		u.Source, u.LeaseID, u.Token = SourceLease, leaseID, ev.FencingToken
	} else {
		u.Source = SourceOverage
	}
	return r
}
