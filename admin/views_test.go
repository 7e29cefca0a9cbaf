package admin

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/tollgated/tollgated/ledger"
)

func TestUsageView(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.createAccount(`{"id":"other"}`)
	ctx := context.Background()
	events := []ledger.Usage{
		{ID: [16]byte{1}, Account: "acme", Source: ledger.UsagePostPaid, Units: 7, OccurredAt: startNs},
		{ID: [16]byte{2}, Account: "other", Source: ledger.UsagePostPaid, Units: 9, OccurredAt: startNs},
		{ID: [16]byte{3}, Account: "acme", Source: ledger.UsagePostPaid, Units: 3, OccurredAt: startNs + 1e9},
	}
	if _, err := h.store.Ingest(ctx, events, startNs); err != nil {
		t.Fatal(err)
	}
	v := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/usage", "")
	usage := v["items"].([]any)
	if v["next_cursor"] != nil || len(usage) != 2 {
		t.Fatalf("usage %v", v)
	}
	// Newest first.
	first := usage[0].(map[string]any)
	if first["id"] != "03000000000000000000000000000000" || first["source"] != "post_paid" || first["units"] != 3.0 ||
		first["occurred_at"] != "2026-06-27T08:00:01Z" || first["account"] != "acme" {
		t.Fatalf("event %v", first)
	}
	page := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/usage?limit=1", "")
	if got := page["items"].([]any); len(got) != 1 || got[0].(map[string]any)["units"] != 3.0 {
		t.Fatalf("limit=1 returned %v", got)
	}
	rest := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/usage?limit=1&cursor="+page["next_cursor"].(string), "")
	if got := rest["items"].([]any); len(got) != 1 || got[0].(map[string]any)["units"] != 7.0 || rest["next_cursor"] != nil {
		t.Fatalf("second page %v", rest)
	}
	for _, bad := range []string{"0", "-1", "x", strconv.Itoa(MaxListLimit + 1)} {
		h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/accounts/acme/usage?limit="+bad, "")
	}
	h.fails(http.StatusNotFound, codeUnknownAccount, "GET", "/v1/accounts/nobody/usage", "")
}

func TestLeasesView(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/deposits", `{"units":1000,"idempotency_key":"k"}`)
	ctx := context.Background()
	l1, _, err := h.store.Acquire(ctx, "acme", "node-a", 100, 1, 60e9, startNs)
	if err != nil {
		t.Fatal(err)
	}
	l2, _, err := h.store.Acquire(ctx, "acme", "node-a", 50, 1, 60e9, startNs)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.Release(ctx, l1.ID, l1.Token, 100, startNs+1); err != nil {
		t.Fatal(err)
	}
	all := h.ok(http.StatusOK, "GET", "/v1/leases", "")["items"].([]any)
	if len(all) != 2 {
		t.Fatalf("all leases %v", all)
	}
	active := h.ok(http.StatusOK, "GET", "/v1/leases?active=true", "")["items"].([]any)
	if len(active) != 1 {
		t.Fatalf("active leases %v", active)
	}
	l := active[0].(map[string]any)
	if l["id"] != float64(l2.ID) || l["account"] != "acme" || l["state"] != "active" || l["granted"] != float64(l2.Granted) ||
		l["granted_at"] != "2026-06-27T08:00:00Z" || l["expires_at"] != "2026-06-27T08:01:00Z" {
		t.Fatalf("lease %v", l)
	}
	if got := h.ok(http.StatusOK, "GET", "/v1/leases?active=false", "")["items"].([]any); len(got) != 2 {
		t.Fatalf("active=false %v", got)
	}
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/leases?active=maybe", "")
}

func TestAuditView(t *testing.T) {
	h := newHarness(t)
	empty := h.ok(http.StatusOK, "GET", "/v1/audit", "")
	if len(empty["items"].([]any)) != 0 || empty["next_cursor"] == nil {
		t.Fatalf("empty log %v", empty)
	}
	for _, id := range []string{"a", "b", "c"} {
		h.createAccount(`{"id":"` + id + `"}`)
		h.now.Add(1e9)
	}
	// Polling from the empty log's cursor finds what was added since.
	v := h.ok(http.StatusOK, "GET", "/v1/audit?cursor="+empty["next_cursor"].(string), "")
	recs := v["items"].([]any)
	if len(recs) != 3 {
		t.Fatalf("audit %v", v)
	}
	first := recs[0].(map[string]any)
	if first["seq"] != 1.0 || first["actor"] != "admin/bootstrap" || first["action"] != "account.create" || first["target"] != "a" ||
		first["before"] != nil || first["after"].(map[string]any)["id"] != "a" || first["at"] != "2026-06-27T08:00:00Z" {
		t.Fatalf("record %v", first)
	}
	page := h.ok(http.StatusOK, "GET", "/v1/audit?limit=1", "")
	if recs := page["items"].([]any); len(recs) != 1 || recs[0].(map[string]any)["target"] != "a" {
		t.Fatalf("page %v", page)
	}
	page = h.ok(http.StatusOK, "GET", "/v1/audit?limit=1&cursor="+page["next_cursor"].(string), "")
	if recs := page["items"].([]any); len(recs) != 1 || recs[0].(map[string]any)["target"] != "b" {
		t.Fatalf("second page %v", page)
	}
	last := h.ok(http.StatusOK, "GET", "/v1/audit?cursor="+v["next_cursor"].(string), "")
	if len(last["items"].([]any)) != 0 || last["next_cursor"] != v["next_cursor"] {
		t.Fatalf("past the end %v", last)
	}
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/audit?cursor=-1", "")
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/audit?limit=0", "")
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/audit?after=1", "")
	// A cursor of another listing is refused, not misread.
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/leases?cursor="+v["next_cursor"].(string), "")
}
