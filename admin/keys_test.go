package admin

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
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
	h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/accounts/acme/keys", `{"colour":"x"}`)
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

func TestKeyNameExpiryAndLastUse(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	k := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys", `{"name":"ci runner","expires_at":"2026-06-27T09:00:00Z"}`)
	if k["name"] != "ci runner" || k["expires_at"] != "2026-06-27T09:00:00Z" || k["last_used"] != nil {
		t.Fatalf("key %v", k)
	}
	h.now.Add(1e9)
	plain := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys", `{"expires_at":null}`)
	if plain["name"] != "" || plain["expires_at"] != nil {
		t.Fatalf("plain key %v", plain)
	}
	for _, c := range []struct{ body, field string }{
		{`{"expires_at":"2026-06-27T07:00:00Z"}`, "expires_at"}, // the past
		{`{"expires_at":"tomorrow"}`, "expires_at"},
		{`{"expires_at":1782550800}`, "expires_at"},
		{`{"name":"` + strings.Repeat("n", MaxNameLen+1) + `"}`, "name"},
		{`{"name":"tab\there"}`, "name"},
		{`{"name":null}`, "name"},
	} {
		if p := h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/accounts/acme/keys", c.body); p.Field != c.field {
			t.Errorf("%s: field %q", c.body, p.Field)
		}
	}
	if err := h.store.MarkKeysUsed(t.Context(), []ledger.KeyUse{{ID: k["id"].(string), At: startNs + 60e9}}); err != nil {
		t.Fatal(err)
	}
	list := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/keys", "")["items"].([]any)
	if got := list[0].(map[string]any); got["id"] != k["id"] || got["last_used"] != "2026-06-27T08:01:00Z" {
		t.Fatalf("listed %v", got)
	}

	// At its expiry the sweep revokes it, audits it as tollgated's own
	// change and unbinds it from the data plane.
	h.now.Store(startNs + 3600e9)
	// Whichever sweep gets there first (this call or the listener's own),
	// the key is revoked once.
	if err := h.srv.ExpireKeys(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, before, after := h.lastAudit()
	if r.Action != "key.expire" || r.Actor != "tollgated" || before["revoked"] != false || after["revoked"] != true {
		t.Fatalf("audit %+v %v %v", r, before, after)
	}
	if revoked, _ := h.pub.revokes(); len(revoked) != 1 || revoked[0] != digestOf(t, k["key"].(string)) {
		t.Fatalf("unbound %v", revoked)
	}
	records := len(h.auditLog())
	if err := h.srv.ExpireKeys(t.Context()); err != nil || len(h.auditLog()) != records {
		t.Fatalf("a second sweep: %v, %d records", err, len(h.auditLog())-records)
	}
}

// TestServeSweepsExpiredKeys: the listener's own sweep stops an expired
// key within about a second, without anyone asking.
func TestServeSweepsExpiredKeys(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	k := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys", `{"expires_at":"2026-06-27T08:00:01Z"}`)
	h.now.Store(startNs + 2e9)
	d := digestOf(t, k["key"].(string))
	await.True(t, "the expired key unbound", func() bool {
		revoked, _ := h.pub.revokes()
		return len(revoked) != 0 && revoked[0] == d
	})
}

func TestRotateKey(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	old := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys", `{"name":"svc"}`)
	oldID := old["id"].(string)
	h.now.Add(1e9)
	v := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys/"+oldID+"/rotate", `{"grace_seconds":600}`)
	rotated := v["rotated"].(map[string]any)
	if v["id"] == oldID || v["name"] != "svc" || v["key"] == nil || rotated["id"] != oldID || rotated["revoked"] != false ||
		rotated["expires_at"] != "2026-06-27T08:10:01Z" {
		t.Fatalf("rotation %v", v)
	}
	if h.pub.boundTo(digestOf(t, v["key"].(string))) != "acme" {
		t.Fatal("the new key was not bound")
	}
	if revoked, _ := h.pub.revokes(); len(revoked) != 0 {
		t.Fatal("the old key stopped before its grace ended")
	}
	acts := []string{}
	for _, r := range h.auditLog()[1:] {
		acts = append(acts, r.Action)
	}
	if strings.Join(acts, ",") != "key.create,key.create,key.rotate" {
		t.Fatalf("audit actions %v", acts)
	}
	// Grace 0: the old key stops now, in this request.
	now := h.ok(http.StatusCreated, "POST", "/v1/accounts/acme/keys/"+v["id"].(string)+"/rotate", `{"grace_seconds":0,"name":"svc2"}`)
	if r := now["rotated"].(map[string]any); r["revoked"] != true || now["name"] != "svc2" {
		t.Fatalf("rotation without grace %v", now)
	}
	if revoked, _ := h.pub.revokes(); len(revoked) != 1 || revoked[0] != digestOf(t, v["key"].(string)) {
		t.Fatal("the old key was not unbound at once")
	}
	for _, c := range []struct {
		path, body, code string
		status           int
	}{
		{"/v1/accounts/acme/keys/" + v["id"].(string) + "/rotate", `{}`, codeConflict, 409}, // revoked
		{"/v1/accounts/acme/keys/key_nope/rotate", `{}`, codeNotFound, 404},
		{"/v1/accounts/nobody/keys/" + oldID + "/rotate", `{}`, codeUnknownAccount, 404},
		{"/v1/accounts/acme/keys/" + oldID + "/rotate", `{"grace_seconds":-1}`, codeInvalidField, 400},
		{"/v1/accounts/acme/keys/" + oldID + "/rotate", `{"grace_seconds":2592001}`, codeInvalidField, 400},
		{"/v1/accounts/acme/keys/" + oldID + "/rotate", `{"grace_seconds":1.5}`, codeInvalidField, 400},
		{"/v1/accounts/acme/keys/" + oldID + "/rotate", `{"grace_seconds":1,"grace_seconds":2}`, codeDuplicateField, 400},
	} {
		h.fails(c.status, c.code, "POST", c.path, c.body)
	}
}
