package txn

import (
	"context"
	"fmt"
	"math"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// ReadAncestry reads id and its ancestors, leaf first, through read (a
// snapshot's or a transaction's): ErrNotFound for an unknown id,
// ErrCorrupt for a missing ancestor or a chain deeper than three.
func ReadAncestry(id core.AccountID, read func(core.AccountID) (*ledger.Account, error)) (ledger.Ancestry, error) {
	var an ledger.Ancestry
	for next := id; next != ""; {
		if len(an) == 3 { // org → workspace → agent is as deep as it gets
			return nil, fmt.Errorf("%w: ancestry of %s is deeper than three", ledger.ErrCorrupt, id)
		}
		a, err := read(next)
		if err != nil && len(an) > 0 {
			return nil, fmt.Errorf("%w: ancestry of %s: %w", ledger.ErrCorrupt, id, err)
		}
		if err != nil {
			return nil, err
		}
		an = append(an, a)
		next = a.Parent
	}
	return an, nil
}

// CutPage cuts a page of at most limit items from items, which a backend
// read with one to spare: an item beyond the limit means more follow, and
// the page's next cursor is that of the last item kept.
func CutPage[T any](items []T, limit int, cursor func(T) string) (page []T, next string) {
	if len(items) <= limit {
		return items, ""
	}
	return items[:limit], cursor(items[limit-1])
}

// Children implements ledger.Store. An id that is not valid names no
// account.
func (s *Store) Children(ctx context.Context, id core.AccountID) ([]core.AccountID, error) {
	if id.Validate() != nil {
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	return s.b.Children(ctx, id)
}

// Ancestry is the backend's (Queries) for a valid id; an id that is not
// valid names no account.
func (s *Store) Ancestry(ctx context.Context, id core.AccountID) (ledger.Ancestry, error) {
	if id.Validate() != nil {
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	return s.b.Ancestry(ctx, id)
}

// LeasesOf implements ledger.Store. A holder the backend cannot store
// (TextChecker) holds no lease: Acquire refuses it.
func (s *Store) LeasesOf(ctx context.Context, holder string) ([]ledger.Lease, error) {
	if s.text("lease holder", holder, MaxNameLen) != nil {
		return nil, nil
	}
	return s.b.LeasesOf(ctx, holder)
}

// ExportMark implements ledger.Store. A node the backend cannot store
// (TextChecker) never settled: Settle refuses it.
func (s *Store) ExportMark(ctx context.Context, node string) (uint64, error) {
	if s.text("node", node, MaxNameLen) != nil {
		return 0, nil
	}
	return s.b.ExportMark(ctx, node)
}

// Evidence implements ledger.Store, from the stored state: PeriodEnd tells
// the reader until when it holds.
func (s *Store) Evidence(ctx context.Context, id core.AccountID) (ledger.Evidence, error) {
	an, err := s.Ancestry(ctx, id)
	if err != nil {
		return ledger.Evidence{}, err
	}
	return ledger.EvidenceOf(an.Chain())
}

// ListAccounts implements ledger.Store. A Parent that is not a valid id
// does not exist.
func (s *Store) ListAccounts(ctx context.Context, f ledger.AccountFilter, p ledger.Page) ([]ledger.Account, string, error) {
	if err := p.Check(); err != nil {
		return nil, "", err
	}
	if p.After != "" && core.AccountID(p.After).Validate() != nil {
		return nil, "", fmt.Errorf("%w: cursor %q", ledger.ErrInvalid, p.After)
	}
	if f.Parent != "" && f.Parent.Validate() != nil {
		return nil, "", fmt.Errorf("%w: account %q", ledger.ErrNotFound, f.Parent)
	}
	return s.b.AccountPage(ctx, f, p.After, p.Limit)
}

// ListLeases implements ledger.Store.
func (s *Store) ListLeases(ctx context.Context, active bool, p ledger.Page) ([]ledger.Lease, string, error) {
	if err := p.Check(); err != nil {
		return nil, "", err
	}
	after, err := ledger.SeqCursor(p.After)
	if err != nil || after == math.MaxUint64 {
		return nil, "", err // nothing follows the last possible id
	}
	return s.b.LeasePage(ctx, active, after, p.Limit)
}

// UsageOf implements ledger.Store.
func (s *Store) UsageOf(ctx context.Context, id core.AccountID, limit int) ([]ledger.Usage, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: usage limit %d", ledger.ErrInvalid, limit)
	}
	if id.Validate() != nil {
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	events, _, err := s.b.UsagePage(ctx, id, 0, limit)
	return events, err
}

// ListUsage implements ledger.Store: newest first, so the cursor is the
// sequence of the last (oldest) event listed, and the next page starts
// below it. A page holds at most ledger.MaxPageScan events.
func (s *Store) ListUsage(ctx context.Context, id core.AccountID, p ledger.Page) ([]ledger.Usage, string, error) {
	if err := p.Check(); err != nil {
		return nil, "", err
	}
	before, err := ledger.SeqCursor(p.After)
	if err != nil {
		return nil, "", err
	}
	if id.Validate() != nil {
		return nil, "", fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	return s.b.UsagePage(ctx, id, before, min(p.Limit, ledger.MaxPageScan))
}

// AuditLog implements ledger.Store: up to limit records with Seq > after,
// ascending.
func (s *Store) AuditLog(ctx context.Context, after uint64, limit int) ([]ledger.AuditRecord, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: audit limit %d", ledger.ErrInvalid, limit)
	}
	if after == math.MaxUint64 {
		return nil, nil
	}
	return s.b.AuditAfter(ctx, after, limit)
}
