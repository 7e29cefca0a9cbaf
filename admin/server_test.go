package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

// testSecret is the server secret API keys are digested under in tests.
var testSecret = bytes.Repeat([]byte{7}, 32)

// startNs is the harness clock's start: 2026-06-27T08:00:00Z.
var startNs = time.Date(2026, 6, 27, 8, 0, 0, 0, time.UTC).UnixNano()

// harness is an admin Server on a loopback listener, over a store wrapped
// so tests can make chosen methods fail.
type harness struct {
	t     *testing.T
	store *faultyStore
	pub   *recordingPublisher
	reg   *prometheus.Registry
	srv   *Server
	url   string
	token string
	now   atomic.Int64
}

func newHarness(t *testing.T) *harness { return newHarnessWith(t, true) }

// newHarnessWith starts a harness; withToken=false leaves the store without
// an admin token.
func newHarnessWith(t *testing.T, withToken bool) *harness {
	t.Helper()
	h := &harness{t: t, store: &faultyStore{Store: openStore(t)}, pub: newRecordingPublisher(), reg: prometheus.NewRegistry()}
	h.now.Store(startNs)
	if withToken {
		token, generated, err := EnsureAdminToken(context.Background(), h.store, "", strings.NewReader(strings.Repeat("A", 32)))
		if err != nil || !generated {
			t.Fatalf("EnsureAdminToken: %q %v %v", token, generated, err)
		}
		h.token = token
	} else {
		h.token = AdminTokenPrefix + "not-stored"
	}
	hasher, err := credential.NewHasher(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	h.srv, err = New(Config{Store: h.store, Hasher: hasher, Publisher: h.pub, Registry: h.reg, Now: h.now.Load})
	if err != nil {
		t.Fatal(err)
	}
	h.serve(Limits{})
	return h
}

// serve serves the harness's Server on a new loopback listener with lim,
// as the daemon does, and points the harness at it.
func (h *harness) serve(lim Limits) *http.Server {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	srv, err := h.srv.Serve(ln, lim)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { srv.Close() })
	h.url = "http://" + ln.Addr().String()
	return srv
}

// call sends an authenticated request and returns status, headers and body.
func (h *harness) call(method, path, body string) (int, http.Header, []byte) {
	h.t.Helper()
	return h.callAs("Bearer "+h.token, method, path, body)
}

func (h *harness) callAs(auth, method, path, body string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// ok sends a request that must answer want with JSON, and decodes it.
func (h *harness) ok(want int, method, path, body string) map[string]any {
	h.t.Helper()
	status, hdr, b := h.call(method, path, body)
	if status != want {
		h.t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, b)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		h.t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		h.t.Fatalf("%s %s: %v: %s", method, path, err, b)
	}
	return v
}

// fails sends a request that must answer a problem with status and code,
// and returns the problem.
func (h *harness) fails(status int, code, method, path, body string) problem {
	h.t.Helper()
	got, hdr, b := h.call(method, path, body)
	return h.checkProblem(got, hdr, b, status, code, method+" "+path)
}

func (h *harness) checkProblem(got int, hdr http.Header, b []byte, status int, code, what string) problem {
	h.t.Helper()
	if got != status {
		h.t.Fatalf("%s: status %d, want %d: %s", what, got, status, b)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/problem+json" {
		h.t.Fatalf("%s: content type %q", what, ct)
	}
	var p problem
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		h.t.Fatalf("%s: %v: %s", what, err, b)
	}
	if p.Code != code || p.Status != status || p.Type != "about:blank" || p.Title == "" {
		h.t.Fatalf("%s: problem %+v, want code %s", what, p, code)
	}
	return p
}

// openStore opens a fresh embedded ledger in the test's directory.
func openStore(t *testing.T) ledger.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// faultyStore makes chosen methods fail, to reach internal error paths.
type faultyStore struct {
	ledger.Store
	mu   sync.Mutex
	fail map[string]error
}

func (f *faultyStore) failWith(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]error{}
	}
	f.fail[method] = err
}

func (f *faultyStore) err(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail[method]
}

func (f *faultyStore) Audit(ctx context.Context, r ledger.AuditRecord) (uint64, error) {
	if err := f.err("Audit"); err != nil {
		return 0, err
	}
	return f.Store.Audit(ctx, r)
}

func (f *faultyStore) AdminTokenDigest(ctx context.Context) ([32]byte, bool, error) {
	if err := f.err("AdminTokenDigest"); err != nil {
		return [32]byte{}, false, err
	}
	return f.Store.AdminTokenDigest(ctx)
}

func (f *faultyStore) AdminTokens(ctx context.Context) ([]ledger.AdminToken, error) {
	if err := f.err("AdminTokens"); err != nil {
		return nil, err
	}
	return f.Store.AdminTokens(ctx)
}

func (f *faultyStore) ListLeases(ctx context.Context, active bool, p ledger.Page) ([]ledger.Lease, string, error) {
	if err := f.err("Leases"); err != nil {
		return nil, "", err
	}
	return f.Store.ListLeases(ctx, active, p)
}

func (f *faultyStore) Leases(ctx context.Context, active bool) ([]ledger.Lease, error) {
	if err := f.err("Leases"); err != nil {
		return nil, err
	}
	return f.Store.Leases(ctx, active)
}

func TestNewRequiresItsDependencies(t *testing.T) {
	hasher, _ := credential.NewHasher(testSecret)
	store, pub := openStore(t), newRecordingPublisher()
	for name, cfg := range map[string]Config{
		"store":     {Hasher: hasher, Publisher: pub},
		"hasher":    {Store: store, Publisher: pub},
		"publisher": {Store: store, Hasher: hasher},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New without %s succeeded", name)
		}
	}
	s, err := New(Config{Store: store, Hasher: hasher, Publisher: pub})
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if s.reg == nil || s.now() <= 0 || s.rand == nil {
		t.Fatal("defaults not filled in")
	}
	// Two servers cannot register the same metrics in one registry.
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Store: store, Hasher: hasher, Publisher: pub, Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Store: store, Hasher: hasher, Publisher: pub, Registry: reg}); err == nil {
		t.Fatal("second registration succeeded")
	}
}

func TestUnknownPathIsNotFound(t *testing.T) {
	h := newHarness(t)
	h.fails(http.StatusNotFound, codeNotFound, "GET", "/v2/nothing", "")
	h.fails(http.StatusNotFound, codeNotFound, "GET", "/v1/accounts/a/b/c", "")
	// Unauthenticated, the same path is 401: paths are not revealed.
	st, hdr, b := h.callAs("", "GET", "/v2/nothing", "")
	h.checkProblem(st, hdr, b, http.StatusUnauthorized, codeUnauthorized, "unauthenticated 404")
}

func TestWrongMethodIs405WithAllow(t *testing.T) {
	h := newHarness(t)
	st, hdr, b := h.call("DELETE", "/v1/accounts/acme/policy", "")
	h.checkProblem(st, hdr, b, http.StatusMethodNotAllowed, codeMethodNotAllowed, "DELETE policy")
	if allow := hdr.Get("Allow"); allow != "GET, PUT" {
		t.Fatalf("Allow %q", allow)
	}
	h.fails(http.StatusMethodNotAllowed, codeMethodNotAllowed, "BREW", "/v1/accounts", "")
}

func TestStoreFailureIsInternalWithoutDetail(t *testing.T) {
	h := newHarness(t)
	h.store.failWith("Leases", errors.New("disk on fire at /var/lib/secret"))
	p := h.fails(http.StatusInternalServerError, codeInternal, "GET", "/v1/leases", "")
	if strings.Contains(p.Detail, "secret") {
		t.Fatalf("internal detail leaked: %q", p.Detail)
	}
}
