package admin

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/credential"
)

// digestOf is a secret's digest under the test server secret.
func digestOf(t *testing.T, secret string) credential.Digest {
	t.Helper()
	h, err := credential.NewHasher(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Digest([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// leaks reports whether body shows secret or its digest in any encoding.
func leaks(body []byte, secret string, d credential.Digest) bool {
	s := string(body)
	return strings.Contains(s, secret) || strings.Contains(s, hex.EncodeToString(d[:])) ||
		strings.Contains(s, base64.StdEncoding.EncodeToString(d[:])) || strings.Contains(s, base64.RawURLEncoding.EncodeToString(d[:]))
}

func TestCreateKeyShowsItOnce(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	status, hdr, body := h.call("POST", "/v1/accounts/acme/keys", "")
	if status != http.StatusCreated {
		t.Fatalf("create key: %d %s", status, body)
	}
	v := jsonValue(t, body).(map[string]any)
	key, id := v["key"].(string), v["id"].(string)
	raw, ok := strings.CutPrefix(key, KeyPrefix)
	if b, err := base64.RawURLEncoding.DecodeString(raw); !ok || err != nil || len(b) != 32 {
		t.Fatalf("key %q is not tgk_ + 32 bytes base64url", key)
	}
	if !strings.HasPrefix(id, "key_") || v["account"] != "acme" || v["revoked"] != false || v["created_at"] != "2026-06-27T08:00:00Z" {
		t.Fatalf("key response %v", v)
	}
	if hdr.Get("Location") != "/v1/accounts/acme/keys/"+id {
		t.Fatalf("location %q", hdr.Get("Location"))
	}
	// The data plane was told the key's digest under the server secret.
	d := digestOf(t, key)
	if h.pub.boundTo(d) != "acme" {
		t.Fatal("BindKey not called with the key's digest")
	}
	// A second key, a second later, is a different key.
	h.now.Add(1e9)
	second := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys", `{}`)
	if second["key"] == key || second["id"] == id {
		t.Fatal("two keys are the same")
	}

	// Listing shows both, without secrets or digests.
	status, _, list := h.call("GET", "/v1/accounts/acme/keys", "")
	if status != http.StatusOK || leaks(list, key, d) || strings.Contains(string(list), `"key"`) {
		t.Fatalf("list: %d %s", status, list)
	}
	keys := jsonValue(t, list).(map[string]any)["items"].([]any)
	if len(keys) != 2 || keys[0].(map[string]any)["id"] != id {
		t.Fatalf("keys %v", keys)
	}
	// The audit record names the key, not its secret.
	r, before, after := h.lastAudit()
	if r.Action != "key.create" || !strings.HasPrefix(r.Target, "acme/keys/key_") || before != nil || after["account"] != "acme" {
		t.Fatalf("audit %+v %v", r, after)
	}
	for _, rec := range h.auditLog() {
		if leaks(rec.After, key, d) || leaks(rec.Before, key, d) {
			t.Fatal("an audit record shows the key")
		}
	}
	status, _, auditBody := h.call("GET", "/v1/audit", "")
	if status != http.StatusOK || leaks(auditBody, key, d) {
		t.Fatal("the audit view shows the key")
	}
}

func TestCreateKeyRefusals(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.fails(http.StatusNotFound, codeUnknownAccount, "POST", "/v1/accounts/nobody/keys", "")
	h.fails(http.StatusUnprocessableEntity, codeInvalidField, "POST", "/v1/accounts/acme/keys", `{"colour":"x"}`)
	h.fails(http.StatusBadRequest, codeInvalidJSON, "POST", "/v1/accounts/acme/keys", `{`)
	h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"closed"}`)
	h.fails(http.StatusConflict, codeClosedAccount, "POST", "/v1/accounts/acme/keys", "")
	if h.pub.binds() != 0 {
		t.Fatal("a refused key was bound")
	}
	h.fails(http.StatusNotFound, codeUnknownAccount, "GET", "/v1/accounts/nobody/keys", "")
}

func TestRevokeKey(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.createAccount(`{"id":"other"}`)
	k := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys", "")
	id, d := k["id"].(string), digestOf(t, k["key"].(string))

	// Another account cannot revoke it: 404, and it stays live.
	h.fails(http.StatusNotFound, codeNotFound, "DELETE", "/v1/accounts/other/keys/"+id, "")
	if keys, _ := h.pub.revokes(); len(keys) != 0 {
		t.Fatal("another account's revoke reached the data plane")
	}

	v := h.ok(http.StatusOK, "DELETE", "/v1/accounts/acme/keys/"+id, "")
	if v["revoked"] != true || v["id"] != id || v["key"] != nil {
		t.Fatalf("revoke: %v", v)
	}
	if keys, _ := h.pub.revokes(); len(keys) != 1 || keys[0] != d {
		t.Fatal("RevokeKey not called with the key's digest")
	}
	r, before, after := h.lastAudit()
	if r.Action != "key.revoke" || r.Target != "acme/keys/"+id || before["revoked"] != false || after["revoked"] != true {
		t.Fatalf("audit %+v %v %v", r, before, after)
	}
	// Revoking again answers the same, unbinds again, audits nothing new.
	records := len(h.auditLog())
	h.ok(http.StatusOK, "DELETE", "/v1/accounts/acme/keys/"+id, "")
	if keys, _ := h.pub.revokes(); len(h.auditLog()) != records || len(keys) != 2 {
		t.Fatal("repeat revoke audited or not re-sent")
	}
	list := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/keys", "")["items"].([]any)
	if list[0].(map[string]any)["revoked"] != true {
		t.Fatalf("list after revoke %v", list)
	}

	h.fails(http.StatusNotFound, codeNotFound, "DELETE", "/v1/accounts/acme/keys/key_nope", "")
	h.fails(http.StatusNotFound, codeUnknownAccount, "DELETE", "/v1/accounts/nobody/keys/"+id, "")
}
