package ledgertest

import (
	"reflect"

	"github.com/tollgated/tollgated/core"

	"github.com/tollgated/tollgated/ledger"
)

// testKeys: adding is idempotent for identical records, a conflict
// otherwise; revoking is idempotent; listing filters by account.
func testKeys(h *harness) {
	h.create("org", "", false)
	h.create("other", "", false)
	k1 := ledger.Key{ID: "k1", Account: "org", Digest: [32]byte{1}, CreatedAt: t0}
	k2 := ledger.Key{ID: "k2", Account: "other", Digest: [32]byte{2}, CreatedAt: t0}
	k3 := ledger.Key{ID: "k3", Account: "org", Digest: [32]byte{3}, CreatedAt: t0 + 1}
	for _, k := range []ledger.Key{k1, k2, k3, k1} {
		if err := h.s.AddKey(h.ctx, k); err != nil {
			h.t.Fatalf("add %s: %v", k.ID, err)
		}
	}
	changed := k1
	changed.Digest[0] = 9
	h.wantErr("same id, other digest", h.s.AddKey(h.ctx, changed), ledger.ErrConflict)
	h.wantErr("unknown account", h.s.AddKey(h.ctx, ledger.Key{ID: "k4", Account: "nobody"}), ledger.ErrNotFound)
	h.wantErr("empty id", h.s.AddKey(h.ctx, ledger.Key{Account: "org"}), ledger.ErrInvalid)

	list := func(account core.AccountID, want ...ledger.Key) {
		h.t.Helper()
		got, err := h.s.Keys(h.ctx, account)
		if err != nil || (len(got) != 0 || len(want) != 0) && !reflect.DeepEqual(got, want) {
			h.t.Fatalf("keys of %q: %+v, %v; want %+v", account, got, err, want)
		}
	}
	list("", k1, k2, k3)
	list("org", k1, k3)
	list("other", k2)
	list("nobody")

	r, err := h.s.RevokeKey(h.ctx, "org", "k1")
	revoked := k1
	revoked.Revoked = true
	if err != nil || r != revoked {
		h.t.Fatalf("revoke: %+v, %v", r, err)
	}
	if r, err = h.s.RevokeKey(h.ctx, "org", "k1"); err != nil || r != revoked {
		h.t.Fatalf("revoke again: %+v, %v", r, err)
	}
	_, err = h.s.RevokeKey(h.ctx, "org", "k2") // another account's key
	h.wantErr("revoke another account's key", err, ledger.ErrNotFound)
	_, err = h.s.RevokeKey(h.ctx, "org", "nope")
	h.wantErr("revoke unknown", err, ledger.ErrNotFound)
	h.wantErr("re-add a revoked key as live", h.s.AddKey(h.ctx, k1), ledger.ErrConflict)
	list("org", revoked, k3)
}

// testPlatformTokens mirrors testKeys for platform tokens.
func testPlatformTokens(h *harness) {
	a := ledger.PlatformToken{ID: "rt-a", Digest: [32]byte{1}, CreatedAt: t0}
	b := ledger.PlatformToken{ID: "rt-b", Digest: [32]byte{2}, CreatedAt: t0}
	for _, tok := range []ledger.PlatformToken{b, a, b} {
		if err := h.s.AddPlatformToken(h.ctx, tok); err != nil {
			h.t.Fatalf("add %s: %v", tok.ID, err)
		}
	}
	other := a
	other.CreatedAt++
	h.wantErr("same id, other record", h.s.AddPlatformToken(h.ctx, other), ledger.ErrConflict)
	h.wantErr("empty id", h.s.AddPlatformToken(h.ctx, ledger.PlatformToken{}), ledger.ErrInvalid)
	r, err := h.s.RevokePlatformToken(h.ctx, "rt-a")
	if err != nil || !r.Revoked || r.ID != "rt-a" {
		h.t.Fatalf("revoke: %+v, %v", r, err)
	}
	if r, err = h.s.RevokePlatformToken(h.ctx, "rt-a"); err != nil || !r.Revoked {
		h.t.Fatalf("revoke again: %+v, %v", r, err)
	}
	_, err = h.s.RevokePlatformToken(h.ctx, "rt-x")
	h.wantErr("revoke unknown", err, ledger.ErrNotFound)
	got, err := h.s.PlatformTokens(h.ctx)
	a.Revoked = true
	if err != nil || !reflect.DeepEqual(got, []ledger.PlatformToken{a, b}) {
		h.t.Fatalf("tokens %+v, %v", got, err)
	}
}

// testAdminDigestAndAudit: the first admin digest wins; audit records get
// increasing sequence numbers and read back in order, verbatim.
func testAdminDigestAndAudit(h *harness) {
	if _, ok, err := h.s.AdminTokenDigest(h.ctx); ok || err != nil {
		h.t.Fatalf("digest before any: ok %v, %v", ok, err)
	}
	first, second := [32]byte{0xaa}, [32]byte{0xbb}
	if stored, err := h.s.SetAdminTokenDigest(h.ctx, first); !stored || err != nil {
		h.t.Fatalf("first digest: %v, %v", stored, err)
	}
	if stored, err := h.s.SetAdminTokenDigest(h.ctx, second); stored || err != nil {
		h.t.Fatalf("second digest: %v, %v", stored, err)
	}
	if d, ok, err := h.s.AdminTokenDigest(h.ctx); !ok || err != nil || d != first {
		h.t.Fatalf("digest %x, %v, %v", d, ok, err)
	}

	records := []ledger.AuditRecord{
		{At: t0, Actor: "admin", Action: "account.create", Target: "org", After: []byte(`{"id":"org"}`)},
		{At: t0 + 1, Actor: "admin", Action: "account.status", Target: "org", Before: []byte(`{"s":0}`), After: []byte(`{"s":1}`)},
		{At: t0 + 2, Actor: "admin", Action: "key.revoke", Target: "k1", Before: []byte{}, Seq: 77}, // Seq is the store's
	}
	for i, r := range records {
		seq, err := h.s.Audit(h.ctx, r)
		if err != nil || seq != uint64(i+1) {
			h.t.Fatalf("audit %d: seq %d, %v", i, seq, err)
		}
		records[i].Seq = seq
	}
	log := func(after uint64, limit int, want ...ledger.AuditRecord) {
		h.t.Helper()
		got, err := h.s.AuditLog(h.ctx, after, limit)
		if err != nil || (len(got) != 0 || len(want) != 0) && !reflect.DeepEqual(got, want) {
			h.t.Fatalf("audit log after %d limit %d: %+v, %v\nwant %+v", after, limit, got, err, want)
		}
	}
	log(0, 10, records...)
	log(1, 1, records[1])
	log(2, 10, records[2])
	log(3, 10)
	log(^uint64(0), 10)
	_, err := h.s.AuditLog(h.ctx, 0, 0)
	h.wantErr("limit 0", err, ledger.ErrInvalid)
}

// testSecretFingerprint: the first fingerprint wins, it is distinct from
// the admin token digest, and it survives a restart.
func testSecretFingerprint(h *harness) {
	if _, ok, err := h.s.SecretFingerprint(h.ctx); ok || err != nil {
		h.t.Fatalf("fingerprint before any: ok %v, %v", ok, err)
	}
	first, second := [32]byte{0x5e, 1}, [32]byte{0x5e, 2}
	if stored, err := h.s.SetSecretFingerprint(h.ctx, first); !stored || err != nil {
		h.t.Fatalf("first fingerprint: %v, %v", stored, err)
	}
	if stored, err := h.s.SetSecretFingerprint(h.ctx, second); stored || err != nil {
		h.t.Fatalf("second fingerprint: %v, %v", stored, err)
	}
	if _, ok, err := h.s.AdminTokenDigest(h.ctx); ok || err != nil {
		h.t.Fatalf("the fingerprint shows as an admin token digest: ok %v, %v", ok, err)
	}
	h.restart()
	if fp, ok, err := h.s.SecretFingerprint(h.ctx); !ok || err != nil || fp != first {
		h.t.Fatalf("fingerprint after restart %x, %v, %v", fp, ok, err)
	}
	if stored, err := h.s.SetSecretFingerprint(h.ctx, second); stored || err != nil {
		h.t.Fatalf("fingerprint replaced after restart: %v, %v", stored, err)
	}
}
