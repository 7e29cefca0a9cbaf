package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

// The fuzz targets drive the real admin Handler through httptest, over a
// real bbolt ledger, with and without the admin token. Each execution
// asserts what the API promises for any input:
//
//   - no handler panics (a panic is answered 500 and counted; the count
//     must stay 0);
//   - the status is one the route documents (docs/API.md);
//   - every error is application/problem+json with a code, its status,
//     a title, and the field for duplicate-field;
//   - nothing is a redirect;
//   - a refused request changes nothing: the ledger's own consistency
//     check passes and the accounts, keys, tokens and audit log read the
//     same before and after, and nothing was published.
//
// `go test` replays the seeds; `go test -fuzz FuzzX ./admin` explores.

// fuzzRoute is one method and path of the admin API, and the statuses
// docs/API.md documents for it (404 is added for every route, as a path
// parameter can make any path unmatched; 401 for every route but /healthz;
// 413 for every route with a body).
type fuzzRoute struct {
	method, path string // path may hold {id}, {key} and {token}
	statuses     []int
	body         []fuzzField // a valid body's fields, for seeds; nil: no body
	query        []string    // a valid query, for seeds
}

// fuzzField is one body field with a valid value (JSON).
type fuzzField struct{ name, valid string }

// Statuses every route may answer: a bad query, a bad body, and the
// ledger failing (no fault is injected, but 500 is documented).
var (
	readStatuses   = []int{200, 400, 404, 500}
	changeStatuses = []int{200, 201, 400, 404, 409, 413, 422, 500}
)

var accountRoutes = []fuzzRoute{
	{method: "POST", path: "/v1/accounts", statuses: changeStatuses,
		body: []fuzzField{{"id", `"new-acct"`}, {"parent", `"acme"`}, {"capacity", `"best_effort"`}, {"unmetered", `true`}}},
	{method: "GET", path: "/v1/accounts", statuses: readStatuses, query: []string{"parent=acme", "status=active", "limit=2"}},
	{method: "GET", path: "/v1/accounts/{id}", statuses: readStatuses},
	{method: "GET", path: "/v1/accounts/{id}/children", statuses: readStatuses, query: []string{"status=suspended", "limit=1"}},
	{method: "POST", path: "/v1/accounts/{id}/status", statuses: changeStatuses, body: []fuzzField{{"status", `"suspended"`}}},
	{method: "PUT", path: "/v1/accounts/{id}/budget", statuses: changeStatuses,
		body: []fuzzField{{"allowance", `1000`}, {"period", `"day"`}}},
	{method: "POST", path: "/v1/accounts/{id}/deposits", statuses: changeStatuses,
		body: []fuzzField{{"units", `500`}, {"idempotency_key", `"inv-1"`}}},
	{method: "DELETE", path: "/v1/accounts/{id}", statuses: []int{405}},
}

var policyRoutes = []fuzzRoute{
	{method: "PUT", path: "/v1/accounts/{id}/policy", statuses: changeStatuses, body: []fuzzField{
		{"permissions", `["chat"]`}, {"operations", `{"input_tokens":{"weight":1,"permission":"chat"},"requests":{"weight":0}}`},
		{"fixed_cost", `0`}, {"minimum_cost", `1`},
		{"limits", `{"max_items":100,"request_rate":10,"request_burst":20,"hold_timeout_ms":1000}`},
		{"mode", `"elastic"`}, {"overage_cap", `5`}, {"deny_threshold", `3`},
	}},
	{method: "GET", path: "/v1/accounts/{id}/policy", statuses: readStatuses},
}

var keyRoutes = []fuzzRoute{
	{method: "POST", path: "/v1/accounts/{id}/keys", statuses: changeStatuses,
		body: []fuzzField{{"name", `"ci"`}, {"expires_at", `"2030-01-01T00:00:00Z"`}}},
	{method: "GET", path: "/v1/accounts/{id}/keys", statuses: readStatuses, query: []string{"limit=1"}},
	{method: "DELETE", path: "/v1/accounts/{id}/keys/{key}", statuses: changeStatuses},
	{method: "POST", path: "/v1/accounts/{id}/keys/{key}/rotate", statuses: changeStatuses,
		body: []fuzzField{{"grace_seconds", `60`}, {"name", `"svc"`}, {"expires_at", `null`}}},
}

var tokenRoutes = []fuzzRoute{
	{method: "POST", path: "/v1/platform-tokens", statuses: changeStatuses, body: []fuzzField{}},
	{method: "GET", path: "/v1/platform-tokens", statuses: readStatuses, query: []string{"limit=1"}},
	{method: "DELETE", path: "/v1/platform-tokens/{token}", statuses: changeStatuses},
	{method: "POST", path: "/v1/admin-tokens", statuses: changeStatuses, body: []fuzzField{{"name", `"ops"`}}},
	{method: "GET", path: "/v1/admin-tokens", statuses: readStatuses, query: []string{"limit=1"}},
	{method: "DELETE", path: "/v1/admin-tokens/{token}", statuses: changeStatuses},
}

var viewRoutes = []fuzzRoute{
	{method: "GET", path: "/v1/accounts/{id}/usage", statuses: readStatuses, query: []string{"limit=1"}},
	{method: "GET", path: "/v1/leases", statuses: readStatuses, query: []string{"active=true", "limit=1"}},
	{method: "GET", path: "/v1/audit", statuses: readStatuses, query: []string{"limit=1"}},
	{method: "GET", path: "/healthz", statuses: []int{200, 503}},
	// {id} is the raw path here: every unmatched, unclean or odd path.
	{method: "GET", path: "{raw}", statuses: []int{200, 400, 404, 405, 500}},
	{method: "POST", path: "{raw}", statuses: []int{200, 201, 400, 404, 405, 409, 413, 422, 500}},
}

// fuzzEnv is one fuzzing process's Server and ledger. The ledger is
// replaced every fuzzResetEvery executions, so the state checks stay
// cheap however long a run is.
type fuzzEnv struct {
	dir   string
	store *boltstore.Store
	pub   *recordingPublisher
	srv   *Server
	token string
	execs int
}

const fuzzResetEvery = 500

// Fixed state every execution starts from: ids the seeds name.
var (
	fuzzNow   = startNs
	fuzzToken = AdminTokenPrefix + "fuzz-admin-token-0123456789"
)

func newFuzzEnv(f *testing.F) *fuzzEnv {
	dir, err := os.MkdirTemp("", "admin-fuzz-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	e := &fuzzEnv{dir: dir, token: fuzzToken}
	if err := e.reset(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.store.Close() })
	return e
}

// reset opens a fresh ledger with: account acme (org, funded, a policy, a
// key "fuzz-key", a lease and usage), ws under it, agent under ws,
// gone (closed), a platform token "fuzz-ptk" and an admin token
// "fuzz-atk" beside the bootstrap one.
func (e *fuzzEnv) reset() error {
	if e.store != nil {
		e.store.Close()
	}
	path := filepath.Join(e.dir, fmt.Sprintf("ledger-%d.db", e.execs))
	os.Remove(filepath.Join(e.dir, fmt.Sprintf("ledger-%d.db", e.execs-fuzzResetEvery)))
	s, err := boltstore.Open(path, boltstore.Options{NoSync: true})
	if err != nil {
		return err
	}
	e.store = s
	ctx := context.Background()
	if _, err := s.SetAdminTokenDigest(ctx, sha256.Sum256([]byte(e.token))); err != nil {
		return err
	}
	for _, spec := range []ledger.AccountSpec{{ID: "acme"}, {ID: "ws", Parent: "acme"}, {ID: "agent", Parent: "ws", Unmetered: true}, {ID: "gone"}} {
		if _, _, err := s.CreateAccount(ctx, spec, fuzzNow); err != nil {
			return err
		}
	}
	if _, _, err := s.Deposit(ctx, "acme", 1_000_000, "seed", fuzzNow); err != nil {
		return err
	}
	if _, err := s.SetStatus(ctx, "gone", core.StatusClosed); err != nil {
		return err
	}
	if _, err := s.SetPolicy(ctx, "acme", []byte(`{"permissions":[],"operations":{"units":{"weight":1}},"fixed_cost":0,"minimum_cost":0,"limits":{"max_items":10,"request_rate":0,"request_burst":0,"unit_rate":0,"unit_burst":0,"max_concurrent":0,"principal_max_concurrent":0,"hold_timeout_ms":30000},"mode":"strict","overage_cap":0,"deny_threshold":0}`)); err != nil {
		return err
	}
	if err := s.AddKey(ctx, ledger.Key{ID: "fuzz-key", Account: "acme", Name: "seed", Digest: [32]byte{1}, CreatedAt: fuzzNow}); err != nil {
		return err
	}
	if err := s.AddPlatformToken(ctx, ledger.PlatformToken{ID: "fuzz-ptk", Digest: [32]byte{2}, CreatedAt: fuzzNow}); err != nil {
		return err
	}
	if err := s.AddAdminToken(ctx, ledger.AdminToken{ID: "fuzz-atk", Name: "seed", Digest: [32]byte{3}, CreatedAt: fuzzNow, Role: ledger.RoleAdmin}); err != nil {
		return err
	}
	l, _, err := s.Acquire(ctx, "acme", "node-a", 1000, 1, 60e9, fuzzNow)
	if err != nil {
		return err
	}
	if _, err := s.Ingest(ctx, []ledger.Usage{{ID: [16]byte{9}, Account: "acme", Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: 10, OccurredAt: fuzzNow}}, fuzzNow); err != nil {
		return err
	}
	hasher, err := credential.NewHasher(testSecret)
	if err != nil {
		return err
	}
	e.pub = newRecordingPublisher()
	e.srv, err = New(Config{Store: s, Hasher: hasher, Publisher: e.pub, Registry: prometheus.NewRegistry(),
		Now: func() int64 { return fuzzNow }, Holdings: holdings{"acme": 7}})
	return err
}

// ledgerState is what a refused request must leave as it was.
type ledgerState struct {
	accounts []ledger.Account
	keys     []ledger.Key
	ptokens  []ledger.PlatformToken
	atokens  []ledger.AdminToken
	audit    []ledger.AuditRecord
	leases   []ledger.Lease
	pub      int
}

func (e *fuzzEnv) state(t *testing.T) ledgerState {
	ctx := context.Background()
	var st ledgerState
	var err error
	if st.accounts, err = e.store.Accounts(ctx); err != nil {
		t.Fatal(err)
	}
	if st.keys, err = e.store.Keys(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if st.ptokens, err = e.store.PlatformTokens(ctx); err != nil {
		t.Fatal(err)
	}
	if st.atokens, err = e.store.AdminTokens(ctx); err != nil {
		t.Fatal(err)
	}
	if st.audit, err = e.store.AuditLog(ctx, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if st.leases, err = e.store.Leases(ctx, false); err != nil {
		t.Fatal(err)
	}
	e.pub.mu.Lock()
	st.pub = len(e.pub.changed) + len(e.pub.bound) + len(e.pub.revoked) + len(e.pub.tokens) + len(e.pub.revokedTokens)
	e.pub.mu.Unlock()
	return st
}

// diff names what differs between two states ("" for nothing).
func (st ledgerState) diff(o ledgerState) string {
	for _, c := range []struct {
		what string
		a, b any
	}{{"accounts", st.accounts, o.accounts}, {"keys", st.keys, o.keys}, {"platform tokens", st.ptokens, o.ptokens},
		{"admin tokens", st.atokens, o.atokens}, {"the audit log", st.audit, o.audit}, {"leases", st.leases, o.leases},
		{"what was published", st.pub, o.pub}} {
		if !reflect.DeepEqual(c.a, c.b) {
			return fmt.Sprintf("%s:\nbefore %+v\n after %+v", c.what, c.a, c.b)
		}
	}
	return ""
}

// fuzzRoutes runs one target over routes.
func fuzzRoutes(f *testing.F, routes []fuzzRoute) {
	addSeeds(f, routes)
	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, route uint8, auth uint8, id string, query string, body []byte) {
		e.execs++
		if e.execs%fuzzResetEvery == 0 {
			if err := e.reset(); err != nil {
				t.Fatal(err)
			}
		}
		r := routes[int(route)%len(routes)]
		target := r.path
		if target == "{raw}" {
			target = id
		} else {
			target = strings.NewReplacer("{id}", url.PathEscape(id), "{key}", url.PathEscape(id), "{token}", url.PathEscape(id)).Replace(target)
		}
		if query != "" {
			target += "?" + query
		}
		req, err := newFuzzRequest(r.method, target, body)
		if err != nil {
			return // not a request any client could send
		}
		if strings.HasPrefix(req.URL.Path, "/debug/pprof") {
			return // profiles run for seconds; TestPprofQueriesAreChecked covers their refusals
		}
		switch auth % 4 {
		case 0:
			req.Header.Set("Authorization", "Bearer "+e.token)
		case 1: // none
		case 2:
			req.Header.Set("Authorization", "Bearer "+e.token+"x")
		case 3:
			req.Header.Set("Authorization", "bearer  "+e.token)
		}
		before := e.state(t)
		w := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(w, req)
		// The dashboard's paths answer without a token (ui.go): as if authed.
		checkAnswer(t, r, auth%4 == 0 || auth%4 == 3 || dashboardPath(req.URL.Path), w)
		if n := testutil.ToFloat64(e.srv.metrics.panics); n != 0 {
			t.Fatalf("%s %s: a handler panicked", r.method, target)
		}
		if err := e.store.Check(context.Background()); err != nil {
			t.Fatalf("%s %s: %d: the ledger fails its check: %v", r.method, target, w.Code, err)
		}
		if w.Code >= 400 {
			if what := before.diff(e.state(t)); what != "" {
				t.Fatalf("%s %s %q: refused %d (%s) but changed %s", r.method, target, body, w.Code, w.Body.Bytes(), what)
			}
		}
	})
}

// newFuzzRequest builds a request the way net/http's server would hand it
// to the handler; targets net/http would refuse are skipped.
func newFuzzRequest(method, target string, body []byte) (req *http.Request, err error) {
	defer func() {
		if recover() != nil { // httptest.NewRequest panics on what a server never parses
			req, err = nil, fmt.Errorf("unparseable")
		}
	}()
	if target == "" || strings.ContainsAny(target, " \r\n\x00") || (target[0] != '/' && target != "*") {
		return nil, fmt.Errorf("unparseable")
	}
	if _, err := url.ParseRequestURI(target); err != nil && target != "*" {
		return nil, err
	}
	return httptest.NewRequest(method, target, bytes.NewReader(body)), nil
}

// dashboardPath reports whether p is under /ui, which the dashboard serves
// without the admin token (its files, or 404 for none).
func dashboardPath(p string) bool { return p == "/ui" || strings.HasPrefix(p, "/ui/") }

// checkAnswer asserts the status is documented and every error a problem.
func checkAnswer(t *testing.T, r fuzzRoute, authed bool, w *httptest.ResponseRecorder) {
	t.Helper()
	// 404: a path parameter can make any path unmatched ("", "..").
	allowed := append(slices.Clone(r.statuses), http.StatusNotFound)
	if r.path != "/healthz" {
		allowed = append(allowed, http.StatusUnauthorized)
	}
	if r.body != nil || r.method == "POST" || r.method == "PUT" {
		allowed = append(allowed, http.StatusRequestEntityTooLarge)
	}
	if !slices.Contains(allowed, w.Code) {
		t.Fatalf("%s %s: status %d not among %v: %s", r.method, r.path, w.Code, allowed, w.Body.Bytes())
	}
	if !authed && r.path != "/healthz" && w.Code != http.StatusUnauthorized {
		t.Fatalf("%s %s without a valid token: %d", r.method, r.path, w.Code)
	}
	if w.Code < 400 {
		return
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s %s: %d with content type %q", r.method, r.path, w.Code, ct)
	}
	var p problem
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("%s %s: problem %q: %v", r.method, r.path, w.Body.Bytes(), err)
	}
	if p.Code == "" || p.Status != w.Code || p.Title == "" || p.Type != "about:blank" || statuses[p.Code] == 0 ||
		(p.Code == codeDuplicateField && p.Field == "") {
		t.Fatalf("%s %s: problem %+v for status %d", r.method, r.path, p, w.Code)
	}
}

// addSeeds adds, for every route and each auth mode, a valid request and
// the classic bad ones: every field missing in turn, null, of each wrong
// type, given twice, huge, negative, fractional, a "NaN" string, a
// 400-digit number, over-long, not UTF-8; bodies that are not objects;
// and odd ids and queries.
func addSeeds(f *testing.F, routes []fuzzRoute) {
	wrongs := []string{`null`, `"x"`, `"NaN"`, `""`, `-1`, `0`, `1.5`, `2.0`, `1e3`, `9223372036854775807`, `9223372036854775808`,
		`18446744073709551616`, strings.Repeat("9", 400), `-` + strings.Repeat("9", 400), `true`, `{}`, `[]`, `[1]`, `{"a":1,"a":2}`,
		`"` + strings.Repeat("x", 300) + `"`, "\"\xff\xfe\"", `"2030-01-01T00:00:00Z"`, `"1969-12-31T23:59:59Z"`}
	ids := []string{"acme", "ws", "agent", "gone", "nobody", "fuzz-key", "fuzz-ptk", "fuzz-atk", "bootstrap", "", "Bad Id", "../metrics", "a/b", strings.Repeat("a", 70)}
	for ri, r := range routes {
		route := uint8(ri)
		id := "acme"
		switch {
		case strings.Contains(r.path, "{key}"):
			id = "fuzz-key"
		case strings.Contains(r.path, "{token}") && strings.Contains(r.path, "admin"):
			id = "fuzz-atk"
		case strings.Contains(r.path, "{token}"):
			id = "fuzz-ptk"
		case r.path == "{raw}":
			id = "/v1/accounts"
		}
		valid := object{}
		for _, fl := range r.body {
			valid[fl.name] = json.RawMessage(fl.valid)
		}
		validBody, _ := json.Marshal(valid)
		if r.body == nil {
			validBody = nil
		}
		for auth := range uint8(4) {
			f.Add(route, auth, id, strings.Join(r.query, "&"), validBody)
		}
		for _, other := range ids {
			f.Add(route, uint8(0), other, "", validBody)
		}
		if r.path == "{raw}" { // the dashboard's paths, which take no token
			for _, p := range []string{"/ui", "/ui/app.js", "/ui/nothing"} {
				f.Add(route, uint8(1), p, "", validBody)
			}
		}
		for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=1&limit=2", "cursor=zzz", "cursor=", "nope=1", "%zz", "status=x", "active=maybe", "parent=nobody"} {
			f.Add(route, uint8(0), id, q, validBody)
		}
		for _, b := range []string{"", " ", "[]", "null", `"x"`, "{", "{}", "{}{}", `{"a":1}x`, "\xff", strings.Repeat("[", 5000)} {
			f.Add(route, uint8(0), id, "", []byte(b))
		}
		for _, fl := range r.body {
			missing := object{}
			for k, v := range valid {
				if k != fl.name {
					missing[k] = v
				}
			}
			b, _ := json.Marshal(missing)
			f.Add(route, uint8(0), id, "", b)
			for _, w := range wrongs {
				f.Add(route, uint8(0), id, "", bytes.Replace(validBody, []byte(`"`+fl.name+`":`+fl.valid), []byte(`"`+fl.name+`":`+w), 1))
			}
			dup := append(bytes.TrimSuffix(validBody, []byte("}")), []byte(`,"`+fl.name+`":`+fl.valid+`}`)...)
			f.Add(route, uint8(0), id, "", dup)
		}
	}
}

func FuzzAccountRoutes(f *testing.F) { fuzzRoutes(f, accountRoutes) }
func FuzzPolicyRoutes(f *testing.F)  { fuzzRoutes(f, policyRoutes) }
func FuzzKeyRoutes(f *testing.F)     { fuzzRoutes(f, keyRoutes) }
func FuzzTokenRoutes(f *testing.F)   { fuzzRoutes(f, tokenRoutes) }
func FuzzViewRoutes(f *testing.F)    { fuzzRoutes(f, viewRoutes) }
