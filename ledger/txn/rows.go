package txn

import (
	"cmp"
	"errors"
	"slices"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Helpers for a backend that reads one record at a time (bbolt), where a
// database would answer in one statement.

// WithAncestors reads the accounts ids and all their ancestors, each once,
// through read: what LockAccounts returns. Unknown ids and missing
// ancestors are left out; the scripts report them.
func WithAncestors(ids []core.AccountID, read func(core.AccountID) (ledger.Account, error)) ([]ledger.Account, error) {
	seen := make(map[core.AccountID]bool, 3*len(ids))
	var out []ledger.Account
	for _, id := range ids {
		for next := id; next != "" && !seen[next]; {
			a, err := read(next)
			if errors.Is(err, ledger.ErrNotFound) {
				break
			}
			if err != nil {
				return nil, err
			}
			seen[next] = true
			out = append(out, a)
			next = a.Parent
		}
	}
	return out, nil
}

// DueFirst picks of recs, active leases that expired by now, up to limit
// whose ledger.ReclaimableAt (with grace for those that keep none) is at
// or before now, earliest first, then by id: what DueLeases returns.
func DueFirst(recs []ledger.LeaseRecord, now, grace int64, limit int) []ledger.LeaseRecord {
	at := make(map[uint64]int64, len(recs))
	due := recs[:0:0]
	for _, rec := range recs {
		if t, ok := ledger.ReclaimableAt(&rec.Lease, grace); ok && t <= now {
			at[rec.ID] = t
			due = append(due, rec)
		}
	}
	slices.SortFunc(due, func(a, b ledger.LeaseRecord) int {
		return cmp.Or(cmp.Compare(at[a.ID], at[b.ID]), cmp.Compare(a.ID, b.ID))
	})
	return due[:min(limit, len(due))]
}
