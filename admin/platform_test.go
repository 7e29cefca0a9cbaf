package admin

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

func TestPlatformTokens(t *testing.T) {
	h := newHarness(t)
	v := h.ok(http.StatusCreated, "POST", "/v1/platform-tokens", "")
	token, id := v["token"].(string), v["id"].(string)
	raw, ok := strings.CutPrefix(token, PlatformTokenPrefix)
	if b, err := base64.RawURLEncoding.DecodeString(raw); !ok || err != nil || len(b) != 32 {
		t.Fatalf("token %q is not tgp_ + 32 bytes base64url", token)
	}
	if !strings.HasPrefix(id, "ptk_") || v["revoked"] != false || v["created_at"] != "2026-06-27T08:00:00Z" {
		t.Fatalf("token response %v", v)
	}
	d := digestOf(t, token)
	if !h.pub.tokenBound(d) {
		t.Fatal("BindPlatformToken not called with the token's digest")
	}
	r, before, after := h.lastAudit()
	if r.Action != "platform_token.create" || r.Target != "platform-tokens/"+id || before != nil || after["id"] != id {
		t.Fatalf("audit %+v", r)
	}

	status, _, list := h.call("GET", "/v1/platform-tokens", "")
	if status != http.StatusOK || leaks(list, token, d) || strings.Contains(string(list), `"token"`) {
		t.Fatalf("list: %d %s", status, list)
	}
	tokens := jsonValue(t, list).(map[string]any)["items"].([]any)
	if len(tokens) != 1 || tokens[0].(map[string]any)["id"] != id {
		t.Fatalf("tokens %v", tokens)
	}

	v = h.ok(http.StatusOK, "DELETE", "/v1/platform-tokens/"+id, "")
	if v["revoked"] != true || v["token"] != nil {
		t.Fatalf("revoke %v", v)
	}
	if _, tokens := h.pub.revokes(); len(tokens) != 1 || tokens[0] != d {
		t.Fatal("RevokePlatformToken not called with the digest")
	}
	r, before, after = h.lastAudit()
	if r.Action != "platform_token.revoke" || before["revoked"] != false || after["revoked"] != true {
		t.Fatalf("audit %+v", r)
	}
	records := len(h.auditLog())
	h.ok(http.StatusOK, "DELETE", "/v1/platform-tokens/"+id, "")
	if _, tokens := h.pub.revokes(); len(h.auditLog()) != records || len(tokens) != 2 {
		t.Fatal("repeat revoke audited or not re-sent")
	}
	for _, rec := range h.auditLog() {
		if leaks(rec.Before, token, d) || leaks(rec.After, token, d) {
			t.Fatal("an audit record shows the token")
		}
	}

	h.fails(http.StatusNotFound, codeNotFound, "DELETE", "/v1/platform-tokens/ptk_nope", "")
	h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/platform-tokens", `{"scope":"all"}`)
	h.fails(http.StatusMethodNotAllowed, codeMethodNotAllowed, "PUT", "/v1/platform-tokens", `{}`)
}

func TestSecretsNeedRandomness(t *testing.T) {
	h := newHarness(t)
	h.srv.mu.Lock()
	h.srv.rand = strings.NewReader("") // exhausted: every read fails
	h.srv.mu.Unlock()
	h.createAccount(`{"id":"acme"}`)
	h.fails(http.StatusInternalServerError, codeInternal, "POST", "/v1/accounts/acme/keys", "")
	h.fails(http.StatusInternalServerError, codeInternal, "POST", "/v1/platform-tokens", "")
	if h.pub.binds() != 0 {
		t.Fatal("a secret was bound without randomness")
	}
}
