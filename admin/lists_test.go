package admin

import (
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/tollgated/tollgated/core"
)

// pageThrough follows path's cursors with limit and returns every item.
func (h *harness) pageThrough(path string, limit int) []map[string]any {
	h.t.Helper()
	var all []map[string]any
	sep := "?"
	if u, _ := url.Parse(path); u.RawQuery != "" {
		sep = "&"
	}
	next := ""
	for range 100 {
		p := path + sep + "limit=" + itoa(limit)
		if next != "" {
			p += "&cursor=" + next
		}
		v := h.ok(http.StatusOK, "GET", p, "")
		items := v["items"].([]any)
		if len(items) > limit {
			h.t.Fatalf("%s: %d items for limit %d", p, len(items), limit)
		}
		for _, it := range items {
			all = append(all, it.(map[string]any))
		}
		c, ok := v["next_cursor"].(string)
		if !ok {
			return all
		}
		next = c
	}
	h.t.Fatalf("%s: more than 100 pages", path)
	return nil
}

func ids(items []map[string]any) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it["id"].(string))
	}
	return out
}

func TestListAccountsAndChildren(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"org"}`)
	h.createAccount(`{"id":"other"}`)
	for _, ws := range []string{"ws-c", "ws-a", "ws-b"} {
		h.createAccount(`{"id":"` + ws + `","parent":"org"}`)
	}
	h.createAccount(`{"id":"agent","parent":"ws-a"}`)
	h.ok(http.StatusOK, "POST", "/v1/accounts/ws-b/status", `{"status":"suspended"}`)
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/v1/accounts", []string{"agent", "org", "other", "ws-a", "ws-b", "ws-c"}},
		{"/v1/accounts?parent=org", []string{"ws-a", "ws-b", "ws-c"}},
		{"/v1/accounts/org/children", []string{"ws-a", "ws-b", "ws-c"}},
		{"/v1/accounts/org/children?status=active", []string{"ws-a", "ws-c"}},
		{"/v1/accounts?status=suspended", []string{"ws-b"}},
		{"/v1/accounts/agent/children", []string{}},
	} {
		for _, limit := range []int{1, 2, 100} {
			if got := ids(h.pageThrough(c.path, limit)); !slices.Equal(got, c.want) {
				t.Errorf("%s by %d: %v, want %v", c.path, limit, got, c.want)
			}
		}
	}
	// Items are account views.
	first := h.ok(http.StatusOK, "GET", "/v1/accounts?parent=ws-a", "")["items"].([]any)[0].(map[string]any)
	if first["id"] != "agent" || first["scope"] != "agent" || first["funds"] == nil {
		t.Fatalf("item %v", first)
	}
	for _, c := range []struct {
		path, code, field string
		status            int
	}{
		{"/v1/accounts?parent=nobody", codeUnknownAccount, "parent", 404},
		{"/v1/accounts/nobody/children", codeUnknownAccount, "", 404},
		{"/v1/accounts?parent=Bad!", codeInvalidQuery, "parent", 400},
		{"/v1/accounts?status=asleep", codeInvalidQuery, "status", 400},
		{"/v1/accounts?colour=red", codeInvalidQuery, "colour", 400},
		{"/v1/accounts?limit=1&limit=2", codeDuplicateField, "limit", 400},
		{"/v1/accounts?cursor=nonsense", codeInvalidQuery, "cursor", 400},
		{"/v1/accounts?cursor=" + encodeCursor(listLeases, "1"), codeInvalidQuery, "cursor", 400},
		{"/v1/accounts?cursor=" + encodeCursor(listAccounts, "Not An Id"), codeInvalidQuery, "cursor", 400},
		{"/v1/accounts?limit=1001", codeInvalidQuery, "limit", 400},
		{"/v1/accounts?parent=%ff", codeInvalidQuery, "parent", 400},
		{"/v1/accounts/org?x=1", codeInvalidQuery, "x", 400},
	} {
		if p := h.fails(c.status, c.code, "GET", c.path, ""); p.Field != c.field {
			t.Errorf("%s: field %q, want %q", c.path, p.Field, c.field)
		}
	}
	h.fails(http.StatusBadRequest, codeInvalidQuery, "POST", "/v1/accounts?x=1", `{"id":"q"}`)
}

func TestListLeasesPages(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/deposits", `{"units":1000,"idempotency_key":"k"}`)
	var want []string
	for range 5 {
		l, _, err := h.store.Acquire(t.Context(), "acme", "node-a", 10, 1, 60e9, startNs)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, itoa(int(l.ID)))
	}
	for _, limit := range []int{1, 3, 100} {
		var got []string
		for _, it := range h.pageThrough("/v1/leases?active=true", limit) {
			got = append(got, itoa(int(it["id"].(float64))))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("by %d: %v, want %v", limit, got, want)
		}
	}
}

// holdings is a fixed Holdings.
type holdings map[core.AccountID]core.CostUnits

func (h holdings) LeaseHoldings(id core.AccountID) core.CostUnits { return h[id] }

// TestFundsCountWhatThisNodeHolds: leasing takes units from the balance at
// once; while this node holds them unspent they can still be spent.
func TestFundsCountWhatThisNodeHolds(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/deposits", `{"units":1000,"idempotency_key":"k"}`)
	if _, _, err := h.store.Acquire(t.Context(), "acme", "node-a", 300, 1, 60e9, startNs); err != nil {
		t.Fatal(err)
	}
	acme := func() map[string]any {
		return h.ok(http.StatusOK, "GET", "/v1/accounts/acme", "")["funds"].(map[string]any)
	}
	if f := acme(); f["can_spend"] != 700.0 || f["held_unspent"] != nil || f["in_leases"] != 300.0 {
		t.Fatalf("without holdings: %v", f)
	}
	h.srv.holdings = holdings{"acme": 250}
	if f := acme(); f["can_spend"] != 950.0 || f["held_unspent"] != 250.0 || f["in_leases"] != 300.0 || f["spent"] != 0.0 {
		t.Fatalf("with holdings: %v", f)
	}
	// A report beyond what the ledger has in leases is capped by it.
	h.srv.holdings = holdings{"acme": 5000}
	if f := acme(); f["can_spend"] != 1000.0 || f["held_unspent"] != 300.0 {
		t.Fatalf("over-reported holdings: %v", f)
	}
	// Audit records keep the ledger's view: no node holdings in them.
	h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"suspended"}`)
	_, _, after := h.lastAudit()
	if f := after["funds"].(map[string]any); f["held_unspent"] != nil || f["can_spend"] != 700.0 {
		t.Fatalf("audit funds %v", f)
	}
}

// TestDuplicateStatusClosesNothing: encoding/json took the last of two
// keys, so this closed the account for good.
func TestDuplicateStatusClosesNothing(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	records, published := len(h.auditLog()), h.pub.changes()
	for _, body := range []string{`{"status":"active","status":"closed"}`, `{"status":"active","st\u0061tus":"closed"}`} {
		if p := h.fails(http.StatusBadRequest, codeDuplicateField, "POST", "/v1/accounts/acme/status", body); p.Field != "status" {
			t.Fatalf("field %q", p.Field)
		}
	}
	h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/accounts/acme/status", `{"Status":"closed"}`)
	if a, err := h.store.Account(t.Context(), "acme"); err != nil || a.Status != core.StatusActive {
		t.Fatalf("account after refusals: %+v %v", a, err)
	}
	if len(h.auditLog()) != records || h.pub.changes() != published {
		t.Fatal("a refused change was audited or published")
	}
	p := h.fails(http.StatusBadRequest, codeDuplicateField, "PUT", "/v1/accounts/acme/policy",
		`{"operations":{"a":{"weight":1}},"limits":{"max_items":1},"mode":"strict","MODE":"elastic"}`)
	if p.Field != "MODE" {
		t.Fatalf("policy duplicate field %q", p.Field)
	}
	if a, _ := h.store.Account(t.Context(), "acme"); len(a.Policy) != 0 {
		t.Fatalf("policy stored: %s", a.Policy)
	}
}
