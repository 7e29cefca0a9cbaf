package control

import (
	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/ledger"
)

// The spool's usage sources are the ledger's, byte for byte (this fails to
// compile otherwise), so a record converts to a usage row field by field.
const (
	_ = uint8(uint8(record.SourceLease)-uint8(ledger.UsageLease)) + uint8(uint8(ledger.UsageLease)-uint8(record.SourceLease))
	_ = uint8(uint8(record.SourceOverage)-uint8(ledger.UsageOverage)) + uint8(uint8(ledger.UsageOverage)-uint8(record.SourceOverage))
	_ = uint8(uint8(record.SourcePostPaid)-uint8(ledger.UsagePostPaid)) + uint8(uint8(ledger.UsagePostPaid)-uint8(record.SourcePostPaid))
)

// LedgerUsage is a spooled event as the ledger's usage row.
func LedgerUsage(e *record.Event) ledger.Usage {
	return ledger.Usage{ID: e.ID, Account: e.Account, Source: ledger.UsageSource(e.Source), LeaseID: e.LeaseID,
		Token: e.Token, Units: e.Units, OccurredAt: e.OccurredAt}
}

// LedgerUsages is LedgerUsage of every event.
func LedgerUsages(evs []record.Event) []ledger.Usage {
	out := make([]ledger.Usage, len(evs))
	for i := range evs {
		out[i] = LedgerUsage(&evs[i])
	}
	return out
}

// IngestResults are the ledger's ingest results as the machine reads them.
func IngestResults(res []ledger.IngestResult) []plane.IngestResult {
	out := make([]plane.IngestResult, len(res))
	for i, r := range res {
		switch r {
		case ledger.Accepted:
			out[i] = plane.Accepted
		case ledger.Duplicate:
			out[i] = plane.Duplicate
		default:
			out[i] = plane.Rejected
		}
	}
	return out
}
