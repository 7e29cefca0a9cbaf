package ledgertest

import (
	"reflect"
	"slices"
	"strings"

	"github.com/tollgated/tollgated/core"

	"github.com/tollgated/tollgated/ledger"
)

// key returns key id of account as stored.
func (h *harness) key(account, id string) ledger.Key {
	h.t.Helper()
	keys, err := h.s.Keys(h.ctx, "")
	if err != nil {
		h.t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == id && string(k.Account) == account {
			return k
		}
	}
	h.t.Fatalf("no key %s of %s", id, account)
	return ledger.Key{}
}

// expire runs ExpireKeys and asserts which keys it revoked, in order.
func (h *harness) expire(now int64, limit int, want ...string) {
	h.t.Helper()
	got, err := h.s.ExpireKeys(h.ctx, now, limit)
	if err != nil {
		h.t.Fatalf("expire at %d: %v", now, err)
	}
	ids := []string{}
	for _, k := range got {
		if !k.Revoked {
			h.t.Fatalf("expired key %s returned live", k.ID)
		}
		ids = append(ids, k.ID)
	}
	if want == nil {
		want = []string{}
	}
	if !reflect.DeepEqual(ids, want) {
		h.t.Fatalf("expire at %d limit %d: %v, want %v", now, limit, ids, want)
	}
}

// testKeyExpiry: keys keep their name and expiry; ExpireKeys revokes live
// keys at or past their expiry, earliest first, within its limit, exactly
// once, and never a key revoked by hand or without an expiry.
func testKeyExpiry(h *harness) {
	h.create("org", "", false)
	keys := []ledger.Key{
		{ID: "late", Account: "org", Name: "ci", Digest: [32]byte{1}, CreatedAt: t0, ExpiresAt: t0 + 3*hour},
		{ID: "soon", Account: "org", Name: "laptop", Digest: [32]byte{2}, CreatedAt: t0, ExpiresAt: t0 + hour},
		{ID: "never", Account: "org", Digest: [32]byte{3}, CreatedAt: t0},
		{ID: "mid", Account: "org", Digest: [32]byte{4}, CreatedAt: t0, ExpiresAt: t0 + 2*hour},
		{ID: "gone", Account: "org", Digest: [32]byte{5}, CreatedAt: t0, ExpiresAt: t0 + hour},
	}
	for _, k := range keys {
		if err := h.s.AddKey(h.ctx, k); err != nil {
			h.t.Fatalf("add %s: %v", k.ID, err)
		}
	}
	if got := h.key("org", "late"); got != keys[0] {
		h.t.Fatalf("stored %+v, want %+v", got, keys[0])
	}
	if _, err := h.s.RevokeKey(h.ctx, "org", "gone"); err != nil {
		h.t.Fatal(err)
	}
	h.expire(t0+hour-1, 10)
	h.expire(t0+hour, 10, "soon")
	h.expire(t0+hour, 10)
	h.restart()
	h.expire(t0+5*hour, 1, "mid")
	h.expire(t0+5*hour, 10, "late")
	h.expire(t0+100*hour, 10)
	for _, id := range []string{"soon", "mid", "late", "gone"} {
		if !h.key("org", id).Revoked {
			h.t.Fatalf("key %s is live after its expiry", id)
		}
	}
	if h.key("org", "never").Revoked {
		h.t.Fatal("a key without an expiry expired")
	}
	_, err := h.s.ExpireKeys(h.ctx, t0, 0)
	h.wantErr("limit 0", err, ledger.ErrInvalid)
}

// testKeyRotation: the new key is added and the old one expires at the
// grace's end (or its own earlier expiry) in one call; refusals change
// nothing.
func testKeyRotation(h *harness) {
	h.create("org", "", false)
	h.create("other", "", false)
	old := ledger.Key{ID: "k1", Account: "org", Name: "svc", Digest: [32]byte{1}, CreatedAt: t0}
	if err := h.s.AddKey(h.ctx, old); err != nil {
		h.t.Fatal(err)
	}
	next := ledger.Key{ID: "k2", Account: "org", Name: "svc", Digest: [32]byte{2}, CreatedAt: t0 + minute}
	got, err := h.s.RotateKey(h.ctx, "org", "k1", next, t0+hour)
	want := old
	want.ExpiresAt = t0 + hour
	if err != nil || got != want {
		h.t.Fatalf("rotate: %+v, %v; want %+v", got, err, want)
	}
	if h.key("org", "k1") != want || h.key("org", "k2") != next {
		h.t.Fatalf("after rotation: %+v, %+v", h.key("org", "k1"), h.key("org", "k2"))
	}
	// Rotating again with a later end keeps the earlier one.
	third := ledger.Key{ID: "k3", Account: "org", Digest: [32]byte{3}, CreatedAt: t0 + 2*minute}
	if got, err = h.s.RotateKey(h.ctx, "org", "k1", third, t0+2*hour); err != nil || got.ExpiresAt != t0+hour {
		h.t.Fatalf("second rotation: %+v, %v", got, err)
	}
	h.expire(t0+hour, 10, "k1")
	refused := []struct {
		what    string
		account string
		old     string
		next    ledger.Key
		until   int64
		want    error
	}{
		{"a revoked key", "org", "k1", ledger.Key{ID: "k4", Account: "org"}, t0 + hour, ledger.ErrConflict},
		{"another account's key", "other", "k2", ledger.Key{ID: "k4", Account: "other"}, t0 + hour, ledger.ErrNotFound},
		{"an unknown key", "org", "nope", ledger.Key{ID: "k4", Account: "org"}, t0 + hour, ledger.ErrNotFound},
		{"into another account", "org", "k2", ledger.Key{ID: "k4", Account: "other"}, t0 + hour, ledger.ErrInvalid},
		{"into itself", "org", "k2", ledger.Key{ID: "k2", Account: "org"}, t0 + hour, ledger.ErrInvalid},
		{"without an end", "org", "k2", ledger.Key{ID: "k4", Account: "org"}, 0, ledger.ErrInvalid},
		{"into an existing id", "org", "k2", ledger.Key{ID: "k3", Account: "org"}, t0 + hour, ledger.ErrConflict},
	}
	for _, r := range refused {
		_, err := h.s.RotateKey(h.ctx, core.AccountID(r.account), r.old, r.next, r.until)
		h.wantErr("rotating "+r.what, err, r.want)
	}
	if k := h.key("org", "k2"); k.ExpiresAt != 0 || k.Revoked {
		h.t.Fatalf("a refused rotation changed k2: %+v", k)
	}
	all, err := h.s.Keys(h.ctx, "org")
	if err != nil || len(all) != 3 {
		h.t.Fatalf("keys after refusals: %+v, %v", all, err)
	}
}

// testKeyLastUsed: MarkKeysUsed only raises LastUsed, skips unknown keys,
// and lasts across a restart.
func testKeyLastUsed(h *harness) {
	h.create("org", "", false)
	for _, id := range []string{"a", "b"} {
		if err := h.s.AddKey(h.ctx, ledger.Key{ID: id, Account: "org", Digest: [32]byte{id[0]}, CreatedAt: t0}); err != nil {
			h.t.Fatal(err)
		}
	}
	mark := func(uses ...ledger.KeyUse) {
		h.t.Helper()
		if err := h.s.MarkKeysUsed(h.ctx, uses); err != nil {
			h.t.Fatalf("mark %+v: %v", uses, err)
		}
	}
	mark(ledger.KeyUse{ID: "a", At: t0 + hour}, ledger.KeyUse{ID: "nobody", At: t0})
	mark(ledger.KeyUse{ID: "a", At: t0 + minute}, ledger.KeyUse{ID: "b", At: t0 + 2*hour}, ledger.KeyUse{ID: "b", At: t0 + hour})
	mark()
	h.restart()
	if a, b := h.key("org", "a"), h.key("org", "b"); a.LastUsed != t0+hour || b.LastUsed != t0+2*hour {
		h.t.Fatalf("last used: a %d, b %d", a.LastUsed, b.LastUsed)
	}
}

// testAdminTokens: the bootstrap digest is the admin token "bootstrap";
// named tokens add idempotently and revoke like keys; a revoked bootstrap
// token is never replaced.
func testAdminTokens(h *harness) {
	if got, err := h.s.AdminTokens(h.ctx); err != nil || len(got) != 0 {
		h.t.Fatalf("admin tokens of a new store: %+v, %v", got, err)
	}
	if stored, err := h.s.SetAdminTokenDigest(h.ctx, [32]byte{9}); !stored || err != nil {
		h.t.Fatalf("bootstrap: %v, %v", stored, err)
	}
	boot := ledger.AdminToken{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: [32]byte{9}, Role: ledger.RoleAdmin}
	ops := ledger.AdminToken{ID: "atk_ops", Name: "ops on-call", Digest: [32]byte{1}, CreatedAt: t0, Role: ledger.RoleAdmin}
	ci := ledger.AdminToken{ID: "atk_ci", Name: "ci", Digest: [32]byte{2}, CreatedAt: t0 + 1, Role: ledger.RoleAdmin}
	for _, t := range []ledger.AdminToken{ops, ci, ops} {
		if err := h.s.AddAdminToken(h.ctx, t); err != nil {
			h.t.Fatalf("add %s: %v", t.ID, err)
		}
	}
	other := ops
	other.Digest[0] = 7
	h.wantErr("same id, other digest", h.s.AddAdminToken(h.ctx, other), ledger.ErrConflict)
	h.wantErr("the bootstrap id", h.s.AddAdminToken(h.ctx, ledger.AdminToken{ID: ledger.BootstrapAdminTokenID}), ledger.ErrInvalid)
	h.wantErr("empty id", h.s.AddAdminToken(h.ctx, ledger.AdminToken{}), ledger.ErrInvalid)

	list := func(want ...ledger.AdminToken) {
		h.t.Helper()
		got, err := h.s.AdminTokens(h.ctx)
		if err != nil || !reflect.DeepEqual(got, want) {
			h.t.Fatalf("admin tokens %+v, %v\nwant %+v", got, err, want)
		}
	}
	list(ci, ops, boot)
	for range 2 {
		r, err := h.s.RevokeAdminToken(h.ctx, ledger.BootstrapAdminTokenID)
		if err != nil || !r.Revoked || r.Digest != boot.Digest {
			h.t.Fatalf("revoke bootstrap: %+v, %v", r, err)
		}
	}
	_, err := h.s.RevokeAdminToken(h.ctx, "atk_nope")
	h.wantErr("revoke unknown", err, ledger.ErrNotFound)
	h.restart()
	boot.Revoked = true
	list(ci, ops, boot)
	if stored, err := h.s.SetAdminTokenDigest(h.ctx, [32]byte{8}); stored || err != nil {
		h.t.Fatalf("a second bootstrap after revocation: %v, %v", stored, err)
	}
	if d, ok, err := h.s.AdminTokenDigest(h.ctx); !ok || err != nil || d != boot.Digest {
		h.t.Fatalf("bootstrap digest after revocation: %x, %v, %v", d, ok, err)
	}
}

// testAdminTokenRoles: every token keeps the role it was added with, across
// a restart; the bootstrap token is an admin; a role that is none of
// ledger.AdminRoles is refused, and the same id with another role is a
// conflict (a token's power never changes in place).
func testAdminTokenRoles(h *harness) {
	if stored, err := h.s.SetAdminTokenDigest(h.ctx, [32]byte{9}); !stored || err != nil {
		h.t.Fatalf("bootstrap: %v, %v", stored, err)
	}
	var want []ledger.AdminToken
	for i, role := range ledger.AdminRoles {
		t := ledger.AdminToken{ID: "atk_" + role, Name: role + " token", Digest: [32]byte{byte(i + 1)}, CreatedAt: t0, Role: role}
		if err := h.s.AddAdminToken(h.ctx, t); err != nil {
			h.t.Fatalf("add a %s token: %v", role, err)
		}
		want = append(want, t)
	}
	for _, role := range []string{"", "root", "Admin", "viewer "} {
		h.wantErr("role "+role, h.s.AddAdminToken(h.ctx, ledger.AdminToken{ID: "atk_bad", Name: "bad", Digest: [32]byte{7}, Role: role}), ledger.ErrInvalid)
	}
	promoted := want[2] // the viewer
	promoted.Role = ledger.RoleAdmin
	h.wantErr("the same token as an admin", h.s.AddAdminToken(h.ctx, promoted), ledger.ErrConflict)
	revoked, err := h.s.RevokeAdminToken(h.ctx, want[1].ID)
	if err != nil || revoked.Role != ledger.RoleOperator || !revoked.Revoked {
		h.t.Fatalf("revoking the operator's token: %+v, %v", revoked, err)
	}
	want[1].Revoked = true
	want = append(want, ledger.AdminToken{ID: ledger.BootstrapAdminTokenID, Name: ledger.BootstrapAdminTokenID, Digest: [32]byte{9}, Role: ledger.RoleAdmin})
	slices.SortFunc(want, func(a, b ledger.AdminToken) int { return strings.Compare(a.ID, b.ID) })
	for range 2 {
		got, err := h.s.AdminTokens(h.ctx)
		if err != nil || !reflect.DeepEqual(got, want) {
			h.t.Fatalf("admin tokens %+v, %v\nwant %+v", got, err, want)
		}
		h.restart()
	}
}
