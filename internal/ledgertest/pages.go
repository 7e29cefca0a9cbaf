package ledgertest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// maxPages bounds how many pages a listing may take, so a backend whose
// cursor never advances fails instead of looping.
const maxPages = 1000

// pageAll follows a listing's cursors from the first page to the end, each
// page at most limit items, and returns every item in order. It fails on
// an error, a page over its limit, or a cursor that does not move.
func pageAll[T any](h *harness, what string, limit int, list func(p ledger.Page) ([]T, string, error)) []T {
	h.t.Helper()
	var all []T
	after := ""
	for range maxPages {
		items, next, err := list(ledger.Page{After: after, Limit: limit})
		if err != nil {
			h.t.Fatalf("%s after %q limit %d: %v", what, after, limit, err)
		}
		if len(items) > limit {
			h.t.Fatalf("%s: a page of %d items for limit %d", what, len(items), limit)
		}
		all = append(all, items...)
		if next == "" {
			return all
		}
		if next == after {
			h.t.Fatalf("%s: cursor %q does not move", what, next)
		}
		after = next
	}
	h.t.Fatalf("%s: more than %d pages", what, maxPages)
	return nil
}

func accountIDs(accts []ledger.Account) []core.AccountID {
	ids := []core.AccountID{}
	for _, a := range accts {
		ids = append(ids, a.ID)
	}
	return ids
}

// testListAccounts: every page size lists the same accounts in id order,
// filtered by parent and by status; the accounts are the stored ones; a
// cursor stays valid across a restart; bad pages and unknown parents are
// refused.
func testListAccounts(h *harness) {
	h.create("org-b", "", false)
	h.create("org-a", "", false)
	for i := range 7 {
		h.create(core.AccountID(fmt.Sprintf("ws-%d", i)), "org-a", true)
	}
	h.create("agent-x", "ws-3", false)
	for _, id := range []core.AccountID{"ws-1", "ws-4", "org-b"} {
		if _, err := h.s.SetStatus(h.ctx, id, core.StatusSuspended); err != nil {
			h.t.Fatal(err)
		}
	}
	if _, err := h.s.SetStatus(h.ctx, "ws-5", core.StatusClosed); err != nil {
		h.t.Fatal(err)
	}
	list := func(f ledger.AccountFilter, limit int) []core.AccountID {
		h.t.Helper()
		return accountIDs(pageAll(h, fmt.Sprintf("accounts %+v", f), limit, func(p ledger.Page) ([]ledger.Account, string, error) {
			return h.s.ListAccounts(h.ctx, f, p)
		}))
	}
	ws := []core.AccountID{"ws-0", "ws-1", "ws-2", "ws-3", "ws-4", "ws-5", "ws-6"}
	cases := []struct {
		f    ledger.AccountFilter
		want []core.AccountID
	}{
		{ledger.AccountFilter{}, append([]core.AccountID{"agent-x", "org-a", "org-b"}, ws...)},
		{ledger.AccountFilter{Parent: "org-a"}, ws},
		{ledger.AccountFilter{Parent: "ws-3"}, []core.AccountID{"agent-x"}},
		{ledger.AccountFilter{Parent: "agent-x"}, []core.AccountID{}},
		{ledger.AccountFilter{ByStatus: true, Status: core.StatusSuspended}, []core.AccountID{"org-b", "ws-1", "ws-4"}},
		{ledger.AccountFilter{Parent: "org-a", ByStatus: true, Status: core.StatusActive}, []core.AccountID{"ws-0", "ws-2", "ws-3", "ws-6"}},
		{ledger.AccountFilter{Parent: "org-a", ByStatus: true, Status: core.StatusClosed}, []core.AccountID{"ws-5"}},
	}
	for _, limit := range []int{1, 2, 3, 100} {
		for _, c := range cases {
			if got := list(c.f, limit); !reflect.DeepEqual(got, c.want) {
				h.t.Fatalf("accounts %+v by %d: %v, want %v", c.f, limit, got, c.want)
			}
		}
	}
	// The listed accounts are the stored ones, not a summary.
	page, _, err := h.s.ListAccounts(h.ctx, ledger.AccountFilter{}, ledger.Page{Limit: 2})
	if err != nil || len(page) != 2 || !reflect.DeepEqual(page[1], h.account("org-a")) {
		h.t.Fatalf("first page %+v, %v", page, err)
	}
	// A cursor from before a restart continues after it.
	_, next, err := h.s.ListAccounts(h.ctx, ledger.AccountFilter{Parent: "org-a"}, ledger.Page{Limit: 3})
	if err != nil || next == "" {
		h.t.Fatalf("first page of org-a: next %q, %v", next, err)
	}
	h.restart()
	rest := pageAll(h, "rest of org-a", 100, func(p ledger.Page) ([]ledger.Account, string, error) {
		if p.After == "" {
			p.After = next
		}
		return h.s.ListAccounts(h.ctx, ledger.AccountFilter{Parent: "org-a"}, p)
	})
	if got := accountIDs(rest); !reflect.DeepEqual(got, ws[3:]) {
		h.t.Fatalf("after the restart: %v, want %v", got, ws[3:])
	}

	_, _, err = h.s.ListAccounts(h.ctx, ledger.AccountFilter{Parent: "nobody"}, ledger.Page{Limit: 1})
	h.wantErr("children of an unknown parent", err, ledger.ErrNotFound)
	_, _, err = h.s.ListAccounts(h.ctx, ledger.AccountFilter{}, ledger.Page{Limit: 0})
	h.wantErr("limit 0", err, ledger.ErrInvalid)
}

// testListLeases: every lease or only the active ones, in id order, at
// every page size.
func testListLeases(h *harness) {
	h.create("org", "", false)
	h.create("other", "", false)
	h.deposit("org", 1000, "d")
	h.deposit("other", 1000, "d")
	var all, active []uint64
	for i := range 6 {
		id := core.AccountID("org")
		if i%2 == 1 {
			id = "other"
		}
		l, _ := h.acquire(id, 10, 0, hour, t0)
		all = append(all, l.ID)
		if i%3 == 0 {
			h.release(l, 10, t0)
		} else {
			active = append(active, l.ID)
		}
	}
	ids := func(active bool, limit int) []uint64 {
		h.t.Helper()
		out := []uint64{}
		for _, l := range pageAll(h, fmt.Sprintf("leases (active %v)", active), limit, func(p ledger.Page) ([]ledger.Lease, string, error) {
			return h.s.ListLeases(h.ctx, active, p)
		}) {
			out = append(out, l.ID)
			if l != h.lease(l.ID) {
				h.t.Fatalf("listed lease %+v is not the stored one", l)
			}
		}
		return out
	}
	for _, limit := range []int{1, 4, 100} {
		if got := ids(false, limit); !reflect.DeepEqual(got, all) {
			h.t.Fatalf("every lease by %d: %v, want %v", limit, got, all)
		}
		if got := ids(true, limit); !reflect.DeepEqual(got, active) {
			h.t.Fatalf("active leases by %d: %v, want %v", limit, got, active)
		}
	}
	_, _, err := h.s.ListLeases(h.ctx, false, ledger.Page{Limit: -1})
	h.wantErr("negative limit", err, ledger.ErrInvalid)
}

// testListUsage: an account's usage newest first, at every page size,
// exactly what UsageOf returns.
func testListUsage(h *harness) {
	h.create("org", "", false)
	h.create("quiet", "", false)
	var events []ledger.Usage
	for i := range 9 {
		events = append(events, ledger.Usage{ID: eventID(uint64(i + 1)), Account: "org", Source: ledger.UsageOverage,
			Units: core.CostUnits(i + 1), OccurredAt: t0 + int64(i)})
	}
	results := make([]ledger.IngestResult, len(events))
	for i := range results {
		results[i] = ledger.Accepted
	}
	h.ingest(t0, events, results...)
	want, err := h.s.UsageOf(h.ctx, "org", 100)
	if err != nil || len(want) != len(events) || want[0].ID != events[8].ID {
		h.t.Fatalf("usage of org: %+v, %v", want, err)
	}
	for _, limit := range []int{1, 2, 5, 100} {
		got := pageAll(h, "usage", limit, func(p ledger.Page) ([]ledger.Usage, string, error) {
			return h.s.ListUsage(h.ctx, "org", p)
		})
		if !reflect.DeepEqual(got, want) {
			h.t.Fatalf("usage by %d:\n got %+v\nwant %+v", limit, got, want)
		}
	}
	if got := pageAll(h, "quiet usage", 10, func(p ledger.Page) ([]ledger.Usage, string, error) {
		return h.s.ListUsage(h.ctx, "quiet", p)
	}); len(got) != 0 {
		h.t.Fatalf("usage of a quiet account: %+v", got)
	}
	_, _, err = h.s.ListUsage(h.ctx, "nobody", ledger.Page{Limit: 1})
	h.wantErr("usage of an unknown account", err, ledger.ErrNotFound)
}

// BoundedAccountPages checks the listing of s, which holds n accounts
// (more than ledger.MaxPageScan, put there behind its back: creating them
// one call each would take long) named acct-00000, acct-00001, …, all
// active but acct-(n-2), which is suspended. A status filter that matches
// little answers short pages with a cursor, each page reading at most
// ledger.MaxPageScan accounts, not one long scan; unfiltered, a page holds
// at most ledger.MaxPageScan accounts whatever its limit.
func BoundedAccountPages(t *testing.T, s ledger.Store, n int) {
	t.Helper()
	ctx := t.Context()
	f := ledger.AccountFilter{ByStatus: true, Status: core.StatusSuspended}
	page, next, err := s.ListAccounts(ctx, f, ledger.Page{Limit: 10})
	if err != nil || len(page) != 0 || next != fmt.Sprintf("acct-%05d", ledger.MaxPageScan-1) {
		t.Fatalf("first page: %d accounts, next %q, %v", len(page), next, err)
	}
	page, next, err = s.ListAccounts(ctx, f, ledger.Page{After: next, Limit: 10})
	if err != nil || len(page) != 1 || page[0].ID != core.AccountID(fmt.Sprintf("acct-%05d", n-2)) || next != "" {
		t.Fatalf("second page: %+v, next %q, %v", page, next, err)
	}
	page, next, err = s.ListAccounts(ctx, ledger.AccountFilter{}, ledger.Page{Limit: 1 << 62})
	if err != nil || len(page) != ledger.MaxPageScan || next != string(page[ledger.MaxPageScan-1].ID) {
		t.Fatalf("a page without a limit: %d accounts, next %q, %v", len(page), next, err)
	}
	if _, _, err := s.ListAccounts(ctx, f, ledger.Page{After: "Not An Id", Limit: 10}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("malformed cursor: %v", err)
	}
}
