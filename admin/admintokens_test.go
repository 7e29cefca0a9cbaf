package admin

import (
	"net/http"
	"strings"
	"testing"
)

func TestAdminTokens(t *testing.T) {
	h := newHarness(t)
	list := h.ok(http.StatusOK, "GET", "/v1/admin-tokens", "")["items"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["id"] != "bootstrap" || list[0].(map[string]any)["created_at"] != nil {
		t.Fatalf("bootstrap only: %v", list)
	}
	v := h.ok(http.StatusCreated, "POST", "/v1/admin-tokens", `{"name":"ops on-call"}`)
	id, token := v["id"].(string), v["token"].(string)
	if !strings.HasPrefix(id, "atk_") || !strings.HasPrefix(token, AdminTokenPrefix) || v["name"] != "ops on-call" {
		t.Fatalf("new admin token %v", v)
	}
	// It works at once, beside the bootstrap token, and its changes are
	// audited under its id.
	if st, _, b := h.callAs("Bearer "+token, "POST", "/v1/accounts", `{"id":"acme"}`); st != http.StatusCreated {
		t.Fatalf("with the new token: %d %s", st, b)
	}
	if r, _, _ := h.lastAudit(); r.Actor != "admin/"+id {
		t.Fatalf("actor %q", r.Actor)
	}
	status, _, body := h.call("GET", "/v1/admin-tokens", "")
	if status != http.StatusOK || strings.Contains(string(body), token) || strings.Contains(string(body), `"token"`) {
		t.Fatalf("the listing shows a secret: %s", body)
	}
	for _, rec := range h.auditLog() {
		if strings.Contains(string(rec.After), token) {
			t.Fatal("an audit record shows the token")
		}
	}
	for _, body := range []string{`{}`, `{"name":""}`, `{"name":null}`, `{"name":7}`, `{"name":"a","scope":"all"}`, `{"name":"a\u0000b"}`} {
		h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/admin-tokens", body)
	}

	// The new token revokes the bootstrap one: it stops at once.
	st, _, b := h.callAs("Bearer "+token, "DELETE", "/v1/admin-tokens/bootstrap", "")
	if st != http.StatusOK {
		t.Fatalf("revoke bootstrap: %d %s", st, b)
	}
	h.fails(http.StatusUnauthorized, codeUnauthorized, "GET", "/v1/leases", "")
	r, before, after := h.lastAudit()
	if r.Action != "admin_token.revoke" || r.Target != "admin-tokens/bootstrap" || before["revoked"] != false || after["revoked"] != true {
		t.Fatalf("audit %+v", r)
	}
	// The last live token cannot be revoked; revoking a revoked one repeats.
	h.token = token
	h.fails(http.StatusConflict, codeConflict, "DELETE", "/v1/admin-tokens/"+id, "")
	if v := h.ok(http.StatusOK, "DELETE", "/v1/admin-tokens/bootstrap", ""); v["revoked"] != true {
		t.Fatalf("repeat revoke %v", v)
	}
	h.fails(http.StatusNotFound, codeNotFound, "DELETE", "/v1/admin-tokens/atk_nope", "")
	h.ok(http.StatusOK, "GET", "/v1/leases", "")
}
