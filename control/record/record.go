// Package record is the format of the control plane's records in the usage
// spool: billed usage, and the commit journal's entries.
package record

import (
	"encoding/binary"
	"errors"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// A record keeps one event in the spool: fixed-width little-endian fields,
// then the account id.
//
//	kind u8 | source u8 | id [16] | lease u64 | token u64 | units u64 |
//	occurred_at i64 | account_len u8 | account [account_len]
//
// Kind Usage is billed usage. Kind Commit is a commit journal entry: the
// reservation's request id, the lease funding it and its quote (units);
// the usage record with the same id closes it, and one still open when a
// node restarts is billed at its quote.
const (
	fixedLen = 1 + 1 + 16 + 8 + 8 + 8 + 8 + 1
	// MaxLen bounds one encoded record.
	MaxLen = fixedLen + core.MaxAccountIDLen
)

// Kind says what a record is.
type Kind uint8

const (
	Usage  Kind = 1
	Commit Kind = 2
)

var errBad = errors.New("record: malformed spool record")

// Append encodes usage u as a record of kind k after dst.
func Append(dst []byte, k Kind, u *ledger.Usage) []byte {
	dst = append(dst, byte(k), byte(u.Source))
	dst = append(dst, u.ID[:]...)
	dst = binary.LittleEndian.AppendUint64(dst, u.LeaseID)
	dst = binary.LittleEndian.AppendUint64(dst, u.Token)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(u.Units))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(u.OccurredAt))
	dst = append(dst, byte(len(u.Account)))
	return append(dst, u.Account...)
}

// Decode is Append's inverse.
func Decode(b []byte) (Kind, ledger.Usage, error) {
	var u ledger.Usage
	if len(b) < fixedLen || (Kind(b[0]) != Usage && Kind(b[0]) != Commit) {
		return 0, u, errBad
	}
	k := Kind(b[0])
	n := int(b[fixedLen-1])
	if len(b) != fixedLen+n || n == 0 || n > core.MaxAccountIDLen {
		return 0, u, errBad
	}
	u.Source = ledger.UsageSource(b[1])
	copy(u.ID[:], b[2:18])
	u.LeaseID = binary.LittleEndian.Uint64(b[18:])
	u.Token = binary.LittleEndian.Uint64(b[26:])
	u.Units = core.CostUnits(binary.LittleEndian.Uint64(b[34:]))
	u.OccurredAt = int64(binary.LittleEndian.Uint64(b[42:]))
	u.Account = core.AccountID(b[fixedLen:])
	if u.Source < ledger.UsageLease || u.Source > ledger.UsagePostPaid || (k == Commit && u.Source == ledger.UsagePostPaid) {
		return 0, u, errBad
	}
	return k, u, nil
}

// FromEvent is the ledger's view of a billed event from a shard, funded by
// lease leaseID when it was funded by a lease.
func FromEvent(ev *core.UsageEvent, leaseID uint64) ledger.Usage {
	u := ledger.Usage{Account: ev.Account(), Units: ev.Units, OccurredAt: ev.OccurredAt}
	binary.BigEndian.PutUint64(u.ID[:8], ev.RequestID.Hi)
	binary.BigEndian.PutUint64(u.ID[8:], ev.RequestID.Lo)
	if ev.Source == core.SourceLease {
		u.Source, u.LeaseID, u.Token = ledger.UsageLease, leaseID, ev.FencingToken
	} else {
		u.Source = ledger.UsageOverage
	}
	return u
}
