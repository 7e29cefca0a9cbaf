package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// auditLog returns every audit record the store holds.
func (h *harness) auditLog() []ledger.AuditRecord {
	h.t.Helper()
	recs, err := h.store.AuditLog(context.Background(), 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	return recs
}

// funds is an account answer's funds.
func funds(v map[string]any) map[string]any {
	f, _ := v["funds"].(map[string]any)
	return f
}

// lastAudit returns the newest audit record, decoded.
func (h *harness) lastAudit() (ledger.AuditRecord, map[string]any, map[string]any) {
	h.t.Helper()
	recs := h.auditLog()
	if len(recs) == 0 {
		h.t.Fatal("no audit records")
	}
	r := recs[len(recs)-1]
	var before, after map[string]any
	if r.Before != nil {
		if err := json.Unmarshal(r.Before, &before); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := json.Unmarshal(r.After, &after); err != nil {
		h.t.Fatal(err)
	}
	return r, before, after
}

func (h *harness) createAccount(body string) map[string]any {
	h.t.Helper()
	return h.ok(http.StatusCreated, "POST", "/v1/accounts", body)
}

func TestCreateAccount(t *testing.T) {
	h := newHarness(t)
	status, hdr, b := h.call("POST", "/v1/accounts", `{"id":"acme"}`)
	if status != http.StatusCreated || hdr.Get("Location") != "/v1/accounts/acme" {
		t.Fatalf("create: %d %q %s", status, hdr.Get("Location"), b)
	}
	var v map[string]any
	json.Unmarshal(b, &v)
	want := map[string]any{
		"id": "acme", "parent": nil, "capacity": "assured", "unmetered": false, "scope": "org", "status": "active",
		"budget": map[string]any{"allowance": 0.0, "period": "none"}, "policy_generation": 1.0,
		"period_start": nil, "period_end": nil,
		"funds": map[string]any{"can_spend": 0.0, "held_unspent": nil, "in_leases": 0.0, "spent": 0.0, "owed": 0.0,
			"allowance_left": 0.0, "top_up_left": 0.0, "lost": 0.0, "expired": 0.0, "received": 0.0},
	}
	if len(v) != len(want) {
		t.Fatalf("fields: %v", v)
	}
	for k, w := range want {
		if got, _ := json.Marshal(v[k]); string(got) != mustJSON(w) {
			t.Errorf("%s = %s, want %s", k, got, mustJSON(w))
		}
	}
	if a := h.pub.lastChanged(); a.ID != "acme" || a.Scope != core.ScopeOrg {
		t.Fatalf("published %+v", a)
	}
	r, before, after := h.lastAudit()
	if r.Actor != "admin/bootstrap" || r.Action != "account.create" || r.Target != "acme" || before != nil || after["id"] != "acme" || r.At != startNs {
		t.Fatalf("audit %+v %v %v", r, before, after)
	}

	child := h.createAccount(`{"id":"ws-1","parent":"acme","capacity":"best_effort","unmetered":true}`)
	if child["parent"] != "acme" || child["scope"] != "workspace" || child["capacity"] != "best_effort" || child["unmetered"] != true {
		t.Fatalf("child %v", child)
	}
	if agent := h.createAccount(`{"id":"agent.7","parent":"ws-1"}`); agent["scope"] != "agent" {
		t.Fatalf("agent %v", agent)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCreateAccountIsIdempotentAndNeverDestructive(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme","parent":null}`)
	h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/deposits", `{"units":50,"idempotency_key":"k"}`)
	records, published := len(h.auditLog()), h.pub.changes()

	// The same spec again: 200, the existing account (money intact), no
	// audit record, published again.
	again := h.ok(http.StatusOK, "POST", "/v1/accounts", `{"id":"acme","capacity":"assured","parent":null}`)
	if funds(again)["can_spend"] != 50.0 {
		t.Fatalf("repeat create returned %v", again)
	}
	if len(h.auditLog()) != records {
		t.Fatal("an identical create wrote an audit record")
	}
	if h.pub.changes() != published+1 {
		t.Fatal("an identical create did not republish")
	}
	// A different spec: 409, nothing changes.
	h.fails(http.StatusConflict, codeConflict, "POST", "/v1/accounts", `{"id":"acme","capacity":"best_effort"}`)
	if v := h.ok(http.StatusOK, "GET", "/v1/accounts/acme", ""); v["capacity"] != "assured" || funds(v)["can_spend"] != 50.0 {
		t.Fatalf("conflicting create changed the account: %v", v)
	}
}

func TestCreateAccountRefusals(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"org"}`)
	h.createAccount(`{"id":"ws","parent":"org"}`)
	h.createAccount(`{"id":"ag","parent":"ws"}`)
	cases := []struct {
		body, code, field string
	}{
		{`{"id":"Acme"}`, codeInvalidField, "id"},
		{`{"id":""}`, codeInvalidField, "id"},
		{`{}`, codeInvalidField, "id"},
		{`{"id":"a","parent":"Bad"}`, codeInvalidField, "parent"},
		{`{"id":"a","parent":"a"}`, codeInvalidField, "parent"},
		{`{"id":"a","parent":"nobody"}`, codeInvalidField, "parent"},
		{`{"id":"a","unmetered":true}`, codeInvalidField, "unmetered"},
		{`{"id":"a","capacity":"gold"}`, codeInvalidField, "capacity"},
		{`{"id":"a","colour":"red"}`, codeInvalidField, "colour"},
		{`{"id":7}`, codeInvalidField, "id"},
		{`{"id":"a","unmetered":"yes"}`, codeInvalidField, "unmetered"},
		{`{"id":"deeper","parent":"ag"}`, codeInvalidField, ""}, // agents have no children
	}
	for _, c := range cases {
		p := h.fails(http.StatusBadRequest, c.code, "POST", "/v1/accounts", c.body)
		if p.Field != c.field {
			t.Errorf("%s: field %q, want %q (%s)", c.body, p.Field, c.field, p.Detail)
		}
	}
	for _, body := range []string{``, `   `, `[]`, `"acme"`, `{"id":"a"`, `{"id":"a"} {}`, `{"id":"a"}x`, `nul`} {
		h.fails(http.StatusBadRequest, codeInvalidJSON, "POST", "/v1/accounts", body)
	}
	big := `{"id":"a","parent":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	h.fails(http.StatusRequestEntityTooLarge, codeTooLarge, "POST", "/v1/accounts", big)
	if h.pub.changes() != 3 {
		t.Fatalf("refused creates published: %d changes", h.pub.changes())
	}
}

func TestGetAccount(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	if v := h.ok(http.StatusOK, "GET", "/v1/accounts/acme", ""); v["id"] != "acme" {
		t.Fatalf("get %v", v)
	}
	h.fails(http.StatusNotFound, codeUnknownAccount, "GET", "/v1/accounts/nobody", "")
	h.fails(http.StatusNotFound, codeUnknownAccount, "GET", "/v1/accounts/NotAnId", "")
}

func TestSetStatus(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	v := h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"suspended"}`)
	if v["status"] != "suspended" || v["policy_generation"] != 2.0 {
		t.Fatalf("suspend: %v", v)
	}
	if a := h.pub.lastChanged(); a.Status != core.StatusSuspended || a.PolicyGeneration != 2 {
		t.Fatalf("published %+v", a)
	}
	r, before, after := h.lastAudit()
	if r.Action != "account.status" || before["status"] != "active" || after["status"] != "suspended" {
		t.Fatalf("audit %+v %v %v", r, before, after)
	}
	records := len(h.auditLog())
	h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"suspended"}`)
	if len(h.auditLog()) != records {
		t.Fatal("a repeated status wrote an audit record")
	}
	h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"closed"}`)
	h.fails(http.StatusConflict, codeClosedAccount, "POST", "/v1/accounts/acme/status", `{"status":"active"}`)

	h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/accounts/acme/status", `{"status":"paused"}`)
	h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/accounts/acme/status", `{}`)
	h.fails(http.StatusBadRequest, codeInvalidJSON, "POST", "/v1/accounts/acme/status", `{"status":`)
	h.fails(http.StatusNotFound, codeUnknownAccount, "POST", "/v1/accounts/nobody/status", `{"status":"active"}`)
}

func TestSetBudget(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	v := h.ok(http.StatusOK, "PUT", "/v1/accounts/acme/budget", `{"allowance":100,"period":"day"}`)
	if f := funds(v); f["can_spend"] != 100.0 || f["allowance_left"] != 100.0 || f["received"] != 100.0 ||
		v["period_start"] != "2026-06-27T00:00:00Z" || v["period_end"] != "2026-06-28T00:00:00Z" {
		t.Fatalf("budget: %v", v)
	}
	if b := v["budget"].(map[string]any); b["allowance"] != 100.0 || b["period"] != "day" {
		t.Fatalf("budget view %v", b)
	}
	r, before, after := h.lastAudit()
	if r.Action != "account.budget" || funds(before)["can_spend"] != 0.0 || funds(after)["can_spend"] != 100.0 {
		t.Fatalf("audit %+v", r)
	}
	if a := h.pub.lastChanged(); a.Budget != (ledger.Budget{Allowance: 100, Period: ledger.PeriodDay}) {
		t.Fatalf("published %+v", a)
	}
	records := len(h.auditLog())
	h.ok(http.StatusOK, "PUT", "/v1/accounts/acme/budget", `{"allowance":100,"period":"day"}`)
	if len(h.auditLog()) != records {
		t.Fatal("a repeated budget wrote an audit record")
	}
	if v := h.ok(http.StatusOK, "PUT", "/v1/accounts/acme/budget", `{"allowance":0,"period":"none"}`); v["period_start"] != nil {
		t.Fatalf("no period: %v", v)
	}

	cases := []struct{ body, field string }{
		{`{"period":"day"}`, "allowance"},
		{`{"allowance":5}`, "period"},
		{`{"allowance":5,"period":"none"}`, "allowance"},
		{`{"allowance":5,"period":"year"}`, "period"},
		{`{"allowance":1.5,"period":"day"}`, "allowance"},
		{`{"allowance":-1,"period":"day"}`, "allowance"},
		{`{"allowance":1e3,"period":"day"}`, "allowance"},
		{`{"allowance":"5","period":"day"}`, "allowance"},
		{`{"allowance":9223372036854775808,"period":"day"}`, "allowance"},
		{`{"allowance":18446744073709551616,"period":"day"}`, "allowance"},
		{`{"allowance":5,"period":"day","rollover":true}`, "rollover"},
	}
	for _, c := range cases {
		p := h.fails(http.StatusBadRequest, codeInvalidField, "PUT", "/v1/accounts/acme/budget", c.body)
		if p.Field != c.field {
			t.Errorf("%s: field %q, want %q", c.body, p.Field, c.field)
		}
	}
	h.ok(http.StatusOK, "PUT", "/v1/accounts/acme/budget", `{"allowance":9223372036854775807,"period":"month"}`)

	h.createAccount(`{"id":"ws","parent":"acme","unmetered":true}`)
	h.fails(http.StatusBadRequest, codeInvalidField, "PUT", "/v1/accounts/ws/budget", `{"allowance":5,"period":"day"}`)
	h.fails(http.StatusNotFound, codeUnknownAccount, "PUT", "/v1/accounts/nobody/budget", `{"allowance":5,"period":"day"}`)
	h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"closed"}`)
	h.fails(http.StatusConflict, codeClosedAccount, "PUT", "/v1/accounts/acme/budget", `{"allowance":5,"period":"week"}`)
}

func TestDeposit(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	v := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/deposits", `{"units":250,"idempotency_key":"inv-1"}`)
	if f := funds(v); f["top_up_left"] != 250.0 || f["received"] != 250.0 || f["can_spend"] != 250.0 {
		t.Fatalf("deposit: %v", v)
	}
	r, before, after := h.lastAudit()
	if r.Action != "account.deposit" || funds(before)["received"] != 0.0 || funds(after)["received"] != 250.0 {
		t.Fatalf("audit %+v", r)
	}
	records, published := len(h.auditLog()), h.pub.changes()

	// The same key and units again: 200, nothing deposited, nothing
	// audited, published again.
	v = h.ok(http.StatusOK, "POST", "/v1/accounts/acme/deposits", `{"idempotency_key":"inv-1","units":250}`)
	if funds(v)["received"] != 250.0 {
		t.Fatalf("duplicate deposited again: %v", v)
	}
	if len(h.auditLog()) != records || h.pub.changes() != published+1 {
		t.Fatal("duplicate deposit audited or not republished")
	}
	// The same key with other units: 409.
	h.fails(http.StatusConflict, codeConflict, "POST", "/v1/accounts/acme/deposits", `{"units":999,"idempotency_key":"inv-1"}`)
	if v := h.ok(http.StatusOK, "GET", "/v1/accounts/acme", ""); funds(v)["received"] != 250.0 {
		t.Fatalf("conflicting deposit changed the balance: %v", v)
	}

	cases := []struct{ body, field string }{
		{`{"units":0,"idempotency_key":"k"}`, "units"},
		{`{"idempotency_key":"k"}`, "units"},
		{`{"units":-5,"idempotency_key":"k"}`, "units"},
		{`{"units":2.5,"idempotency_key":"k"}`, "units"},
		{`{"units":2.0,"idempotency_key":"k"}`, "units"},
		{`{"units":"5","idempotency_key":"k"}`, "units"},
		{`{"units":9223372036854775808,"idempotency_key":"k"}`, "units"},
		{`{"units":5}`, "idempotency_key"},
		{`{"units":5,"idempotency_key":""}`, "idempotency_key"},
		{`{"units":5,"idempotency_key":"` + strings.Repeat("k", MaxIdempotencyKeyLen+1) + `"}`, "idempotency_key"},
		{`{"units":5,"idempotency_key":"tab\there"}`, "idempotency_key"},
		{`{"units":5,"idempotency_key":"k","memo":"x"}`, "memo"},
	}
	for _, c := range cases {
		p := h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/accounts/acme/deposits", c.body)
		if p.Field != c.field {
			t.Errorf("%s: field %q, want %q", c.body, p.Field, c.field)
		}
	}
	h.fails(http.StatusNotFound, codeUnknownAccount, "POST", "/v1/accounts/nobody/deposits", `{"units":5,"idempotency_key":"k"}`)

	// The largest accepted deposit, then one that would overflow.
	h.createAccount(`{"id":"rich"}`)
	h.ok(http.StatusCreated, "POST", "/v1/accounts/rich/deposits", `{"units":9223372036854775807,"idempotency_key":"a"}`)
	h.ok(http.StatusCreated, "POST", "/v1/accounts/rich/deposits", `{"units":9223372036854775807,"idempotency_key":"b"}`)
	h.fails(http.StatusUnprocessableEntity, codeOverflow, "POST", "/v1/accounts/rich/deposits", `{"units":2,"idempotency_key":"c"}`)

	h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"closed"}`)
	h.fails(http.StatusConflict, codeClosedAccount, "POST", "/v1/accounts/acme/deposits", `{"units":5,"idempotency_key":"late"}`)
}

func TestPublishFailureIsReportedAndTheChangeStands(t *testing.T) {
	h := newHarness(t)
	h.pub.setErr(errors.New("control plane busy"))
	v := h.ok(http.StatusCreated, "POST", "/v1/accounts", `{"id":"acme"}`)
	if !strings.Contains(v["publish_error"].(string), "control plane busy") {
		t.Fatalf("publish error not reported: %v", v)
	}
	h.ok(http.StatusOK, "GET", "/v1/accounts/acme", "")
	v = h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/deposits", `{"units":5,"idempotency_key":"k"}`)
	if v["publish_error"] == nil || funds(v)["received"] != 5.0 {
		t.Fatalf("deposit: %v", v)
	}
	// Once the control plane recovers, repeating the request republishes.
	h.pub.setErr(nil)
	v = h.ok(http.StatusOK, "POST", "/v1/accounts/acme/deposits", `{"units":5,"idempotency_key":"k"}`)
	if _, ok := v["publish_error"]; ok || h.pub.lastChanged().Deposited != 5 {
		t.Fatalf("retry: %v", v)
	}
}

func TestAuditFailureIsReportedAndTheChangeStands(t *testing.T) {
	h := newHarness(t)
	h.store.failWith("Audit", errors.New("audit bucket full"))
	v := h.ok(http.StatusCreated, "POST", "/v1/accounts", `{"id":"acme"}`)
	if !strings.Contains(v["audit_error"].(string), "audit bucket full") {
		t.Fatalf("audit error not reported: %v", v)
	}
	if h.pub.lastChanged().ID != "acme" {
		t.Fatal("an audit failure stopped publication")
	}
	h.ok(http.StatusOK, "GET", "/v1/accounts/acme", "")
}

func TestConcurrentChangesAreEachAuditedOnce(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	const workers, each = 4, 5
	statuses := make(chan int, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				body := `{"units":1,"idempotency_key":"w` + strconv.Itoa(w) + `-` + strconv.Itoa(i) + `"}`
				st, _, _ := h.call("POST", "/v1/accounts/acme/deposits", body)
				statuses <- st
			}
		})
	}
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != http.StatusCreated {
			t.Fatalf("concurrent deposit answered %d", st)
		}
	}
	if v := h.ok(http.StatusOK, "GET", "/v1/accounts/acme", ""); funds(v)["received"] != float64(workers*each) {
		t.Fatalf("received %v", funds(v)["received"])
	}
	// One record per deposit plus the create, each before/after pair
	// consecutive: deposits were serialised, so each before is the
	// previous after.
	recs := h.auditLog()
	if len(recs) != 1+workers*each {
		t.Fatalf("%d audit records", len(recs))
	}
	for i := 2; i < len(recs); i++ {
		var prev, cur map[string]any
		json.Unmarshal(recs[i-1].After, &prev)
		json.Unmarshal(recs[i].Before, &cur)
		if funds(prev)["received"] != funds(cur)["received"] {
			t.Fatalf("record %d: before %v is not the previous after %v", i, funds(cur)["received"], funds(prev)["received"])
		}
	}
}
