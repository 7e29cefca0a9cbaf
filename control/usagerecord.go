package control

import (
	"encoding/binary"
	"errors"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// A usage record is how a billed event is kept in the spool: fixed-width
// little-endian fields, then the account id.
//
//	version u8 | source u8 | id [16] | lease u64 | token u64 | units u64 |
//	occurred_at i64 | account_len u8 | account [account_len]
const (
	usageRecordVersion = 1
	usageRecordFixed   = 1 + 1 + 16 + 8 + 8 + 8 + 8 + 1
	// MaxUsageRecord bounds one encoded record.
	MaxUsageRecord = usageRecordFixed + core.MaxAccountIDLen
)

var errBadUsageRecord = errors.New("control: malformed usage record")

// appendUsageRecord encodes u after dst.
func appendUsageRecord(dst []byte, u *ledger.Usage) []byte {
	dst = append(dst, usageRecordVersion, byte(u.Source))
	dst = append(dst, u.ID[:]...)
	dst = binary.LittleEndian.AppendUint64(dst, u.LeaseID)
	dst = binary.LittleEndian.AppendUint64(dst, u.Token)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(u.Units))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(u.OccurredAt))
	dst = append(dst, byte(len(u.Account)))
	return append(dst, u.Account...)
}

// decodeUsageRecord is appendUsageRecord's inverse.
func decodeUsageRecord(b []byte) (ledger.Usage, error) {
	var u ledger.Usage
	if len(b) < usageRecordFixed || b[0] != usageRecordVersion {
		return u, errBadUsageRecord
	}
	n := int(b[usageRecordFixed-1])
	if len(b) != usageRecordFixed+n || n == 0 || n > core.MaxAccountIDLen {
		return u, errBadUsageRecord
	}
	u.Source = ledger.UsageSource(b[1])
	copy(u.ID[:], b[2:18])
	u.LeaseID = binary.LittleEndian.Uint64(b[18:])
	u.Token = binary.LittleEndian.Uint64(b[26:])
	u.Units = core.CostUnits(binary.LittleEndian.Uint64(b[34:]))
	u.OccurredAt = int64(binary.LittleEndian.Uint64(b[42:]))
	u.Account = core.AccountID(b[usageRecordFixed:])
	if u.Source < ledger.UsageLease || u.Source > ledger.UsagePostPaid {
		return u, errBadUsageRecord
	}
	return u, nil
}

// ledgerUsage is the ledger's view of a billed event from a shard.
func ledgerUsage(ev *core.UsageEvent, leaseID uint64) ledger.Usage {
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
