package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/ledger"
)

func TestEnsureAdminTokenGeneratesOnce(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	token, generated, err := EnsureAdminToken(ctx, store, "", rand.Reader)
	if err != nil || !generated {
		t.Fatalf("first start: %v %v", generated, err)
	}
	raw, ok := strings.CutPrefix(token, AdminTokenPrefix)
	if b, err := base64.RawURLEncoding.DecodeString(raw); !ok || err != nil || len(b) != 32 {
		t.Fatalf("token %q is not tga_ + 32 bytes base64url", token)
	}
	d, ok, _ := store.AdminTokenDigest(ctx)
	if !ok || d != sha256.Sum256([]byte(token)) {
		t.Fatal("stored digest is not SHA-256 of the token")
	}
	// A restart does not generate (or print) another.
	again, generated, err := EnsureAdminToken(ctx, store, "", rand.Reader)
	if err != nil || generated || again != "" {
		t.Fatalf("restart: %q %v %v", again, generated, err)
	}
	// The generated token is the one the environment may then supply.
	if _, _, err := EnsureAdminToken(ctx, store, token, rand.Reader); err != nil {
		t.Fatalf("env token equal to the stored one: %v", err)
	}
}

func TestEnsureAdminTokenFromEnv(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	env := "operator-chosen-token-0123"
	token, generated, err := EnsureAdminToken(ctx, store, env, rand.Reader)
	if err != nil || generated || token != env {
		t.Fatalf("first: %q %v %v", token, generated, err)
	}
	if d, _, _ := store.AdminTokenDigest(ctx); d != sha256.Sum256([]byte(env)) {
		t.Fatal("env token digest not stored")
	}
	if _, _, err := EnsureAdminToken(ctx, store, env, rand.Reader); err != nil {
		t.Fatalf("same env token again: %v", err)
	}
	// A different env token never replaces the stored one.
	if _, _, err := EnsureAdminToken(ctx, store, "another-token-entirely", rand.Reader); !errors.Is(err, ErrAdminTokenMismatch) {
		t.Fatalf("different env token: %v", err)
	}
	if d, _, _ := store.AdminTokenDigest(ctx); d != sha256.Sum256([]byte(env)) {
		t.Fatal("stored digest replaced")
	}
}

func TestEnsureAdminTokenRefusesWeakEnvTokens(t *testing.T) {
	for _, env := range []string{"short", "has a space in it!", "tab\tinside-the-token", strings.Repeat("x", MaxAdminTokenLen+1), "nön-ascii-token-é"} {
		if _, _, err := EnsureAdminToken(context.Background(), openStore(t), env, rand.Reader); !errors.Is(err, ErrBadAdminToken) {
			t.Errorf("%q: %v", env, err)
		}
	}
}

func TestEnsureAdminTokenDefaultsToCryptoRand(t *testing.T) {
	token, generated, err := EnsureAdminToken(context.Background(), openStore(t), "", nil)
	if err != nil || !generated || !strings.HasPrefix(token, AdminTokenPrefix) {
		t.Fatalf("%q %v %v", token, generated, err)
	}
}

func TestEnsureAdminTokenRandomnessFailure(t *testing.T) {
	if _, _, err := EnsureAdminToken(context.Background(), openStore(t), "", strings.NewReader("short")); err == nil {
		t.Fatal("a short random read produced a token")
	}
}

// racingStore stores another process's digest just before ours lands.
type racingStore struct {
	ledger.Store
	theirs [32]byte
}

func (r *racingStore) SetAdminTokenDigest(ctx context.Context, d [32]byte) (bool, error) {
	if _, err := r.Store.SetAdminTokenDigest(ctx, r.theirs); err != nil {
		return false, err
	}
	return r.Store.SetAdminTokenDigest(ctx, d)
}

func TestEnsureAdminTokenLosesARaceGracefully(t *testing.T) {
	ctx := context.Background()
	s := &racingStore{Store: openStore(t), theirs: sha256.Sum256([]byte("their-token-0123456"))}
	token, generated, err := EnsureAdminToken(ctx, s, "", rand.Reader)
	if err != nil || generated || token != "" {
		t.Fatalf("lost race: %q %v %v (a token that does not work must not be printed)", token, generated, err)
	}
	s = &racingStore{Store: openStore(t), theirs: sha256.Sum256([]byte("their-token-0123456"))}
	if _, _, err := EnsureAdminToken(ctx, s, "my-env-token-0123456", rand.Reader); !errors.Is(err, ErrAdminTokenMismatch) {
		t.Fatalf("env token after a lost race: %v", err)
	}
	s = &racingStore{Store: openStore(t), theirs: sha256.Sum256([]byte("same-env-token-0123"))}
	if _, _, err := EnsureAdminToken(ctx, s, "same-env-token-0123", rand.Reader); err != nil {
		t.Fatalf("race with the same env token: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	h := newHarness(t)
	h.ok(http.StatusOK, "GET", "/v1/leases", "")
	if st, _, b := h.callAs("bEaReR "+h.token, "GET", "/v1/leases", ""); st != http.StatusOK {
		t.Fatalf("scheme is case-insensitive: %d %s", st, b)
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Basic " + h.token, h.token, "Bearer " + h.token + "x", "Bearer tga_wrong"} {
		st, hdr, b := h.callAs(auth, "GET", "/v1/leases", "")
		h.checkProblem(st, hdr, b, http.StatusUnauthorized, codeUnauthorized, "auth "+auth)
		want := `Bearer realm="tollgated-admin"`
		if auth != "" {
			want += `, error="invalid_token"`
		}
		if got := hdr.Get("WWW-Authenticate"); got != want {
			t.Errorf("%q: WWW-Authenticate %q, want %q", auth, got, want)
		}
	}
}

func TestAuthenticationWithoutStoredToken(t *testing.T) {
	h := newHarnessWith(t, false)
	h.fails(http.StatusUnauthorized, codeUnauthorized, "GET", "/v1/leases", "")
}

func TestAuthenticationStoreFailure(t *testing.T) {
	h := newHarness(t)
	h.store.failWith("AdminTokens", errors.New("io error"))
	h.fails(http.StatusInternalServerError, codeInternal, "GET", "/v1/leases", "")
}

// TestReadsOutliveALedgerOutageForAWhile: once the tokens have been read,
// a ledger that stops answering leaves read-only requests (the operator's
// /metrics, the dashboard) checked against those tokens for
// StaleTokensFor; a change is refused at once, a wrong token is still
// 401, and past the bound reads fail too.
func TestReadsOutliveALedgerOutageForAWhile(t *testing.T) {
	h := newHarness(t)
	if st, _, b := h.call("GET", "/metrics", ""); st != http.StatusOK {
		t.Fatalf("before the outage: %d %s", st, b)
	}
	h.store.failWith("AdminTokens", errors.New("connection refused"))
	if st, _, b := h.call("GET", "/metrics", ""); st != http.StatusOK {
		t.Fatalf("a read in the outage: %d %s", st, b)
	}
	if st, _, b := h.call("GET", "/v1/leases", ""); st != http.StatusOK {
		t.Fatalf("a read of the API in the outage: %d %s", st, b)
	}
	got, hdr, b := h.callAs("Bearer "+AdminTokenPrefix+"not-a-token-at-all", "GET", "/metrics", "")
	h.checkProblem(got, hdr, b, http.StatusUnauthorized, codeUnauthorized, "a wrong token in the outage")
	h.fails(http.StatusInternalServerError, codeInternal, "POST", "/v1/accounts", `{"id":"x"}`)
	h.now.Add(int64(StaleTokensFor))
	if st, _, b := h.call("GET", "/metrics", ""); st != http.StatusOK {
		t.Fatalf("at the bound: %d %s", st, b)
	}
	h.now.Add(1)
	h.fails(http.StatusInternalServerError, codeInternal, "GET", "/metrics", "")
}

// TestBearerRule: the admin listener follows credential.BearerToken, the
// data plane's rule: the scheme in any case, spaces around the token, and
// a token of visible ASCII only.
func TestBearerRule(t *testing.T) {
	h := newHarness(t)
	for _, auth := range []string{"Bearer " + h.token, "bearer " + h.token, "BEARER  " + h.token + " \t"} {
		if st, _, b := h.callAs(auth, "GET", "/v1/leases", ""); st != http.StatusOK {
			t.Errorf("%q: %d %s", auth, st, b)
		}
	}
	for _, auth := range []string{"Bearer\t" + h.token, "Bearer " + h.token + " extra", "Bearer " + strings.Repeat("x", MaxAdminTokenLen+1)} {
		st, hdr, b := h.callAs(auth, "GET", "/v1/leases", "")
		h.checkProblem(st, hdr, b, http.StatusUnauthorized, codeUnauthorized, "auth "+auth)
	}
}
