// Package admin is tollgated's admin HTTP API: accounts, their status,
// policies, budgets and deposits, API keys (named, expiring, rotatable),
// platform and admin tokens, paged views of accounts, usage, leases and the
// audit log, plus /healthz, /metrics and /debug/pprof/. Serve runs it on
// its own bounded listener (loopback by default), on net/http: it is not
// the hot path, and clarity beats speed here.
//
// Bodies and queries are checked whole, then field by field (decode.go);
// every error, the listener's own included, is a problem+json with a
// stable code (problem.go, listener.go).
//
// Every request but GET /healthz and the dashboard's files (/ui, ui.go)
// needs Authorization: Bearer <admin token>
// (EnsureAdminToken provisions the first; more are created through the
// API). Every change is made in the ledger first, then recorded as an audit
// record (the admin token's id as actor, before and after), then handed to
// the Publisher so the data plane picks it up. The ledger is the truth: when
// the audit record or the publication fails afterwards, the change stands
// and the response says what failed (audit_error, publish_error) alongside
// the new state. Repeating an idempotent request publishes again.
package admin

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
)

// Publisher carries ledger changes to the data plane; the control plane
// implements it.
type Publisher interface {
	// AccountChanged is called after every change to an account (create,
	// status, policy, budget, deposit) with the ledger's new state, so the
	// data plane can republish its snapshot and funding evidence. It is
	// also called when an idempotent request repeats a change, so repeating
	// the request retries a publication that failed. An error is reported
	// in the response; the ledger change stands.
	AccountChanged(acct ledger.Account) error
	// BindKey makes a new API key's digest authenticate as account.
	BindKey(d credential.Digest, account core.AccountID)
	// RevokeKey stops a key at once.
	RevokeKey(d credential.Digest)
	// BindPlatformToken and RevokePlatformToken do the same for the
	// seed-000 platform tokens.
	BindPlatformToken(d credential.Digest)
	RevokePlatformToken(d credential.Digest)
}

// Config is what an admin Server needs.
type Config struct {
	Store ledger.Store // required
	// Hasher digests API keys and platform tokens under the server secret.
	// Required. It is not safe for concurrent use: the Server uses it only
	// under its own lock, so give it one no other goroutine uses.
	Hasher *credential.Hasher
	// Publisher is called with the Server's lock held, in ledger order.
	// Required.
	Publisher Publisher
	// Registry receives the admin metrics and is what /metrics serves;
	// nil means a fresh registry with only the admin metrics.
	Registry *prometheus.Registry
	Now      func() int64   // Unix ns; nil means the wall clock
	Log      zerolog.Logger // the zero Logger logs nothing
	Rand     io.Reader      // secrets and ids; nil means crypto/rand
	// Holdings, when set, tells the account view what this node's leases
	// hold unspent, so "can_spend" counts it (see fundsView). Optional.
	Holdings Holdings
	// Tracing makes the admin requests' spans (tracing.go); nil means the
	// process's global provider (a no-op unless one was set).
	Tracing trace.TracerProvider
	// Events is where GET /v1/events reads the billed-event stream, and
	// Node the stream's CloudEvents source (the node id); without Events
	// the route answers 404. Optional.
	Events EventLog
	Node   string
	// Storage, if set, says whether the node's usage spool takes records:
	// /healthz answers 503 storage-full or storage-failed while it does
	// not. Optional.
	Storage func() StorageState
	// History holds the series the dashboard draws, whose recent past
	// GET /v1/metrics/history serves once KeepHistory is called: a
	// gatherer of those alone keeps the sampling cheap. Optional (none
	// kept without it).
	History prometheus.Gatherer
}

// StorageState is whether the node can make billed usage durable, as
// /healthz reports it.
type StorageState uint8

const (
	StorageOK     StorageState = iota
	StorageFull                // the spool's filesystem is full; it recovers by itself once there is room
	StorageFailed              // the spool failed a write or sync; only a restart ends it
)

// Server serves the admin API.
type Server struct {
	store    ledger.Store
	pub      Publisher
	reg      *prometheus.Registry
	now      func() int64
	log      zerolog.Logger
	metrics  *metrics
	scrape   http.Handler // promhttp over reg
	handler  http.Handler
	holdings Holdings
	tracing  trace.TracerProvider
	eventLog EventLog
	node     string
	storage  func() StorageState
	hist     history             // the recent past of the dashboard's series (history.go)
	history  prometheus.Gatherer // what hist samples; nil: nothing
	served   context.Context     // ends when the listener Serve started shuts down
	// stopHistory ends KeepHistory's sampling and waits for it; nil
	// before KeepHistory. histMu guards it.
	histMu      sync.Mutex
	stopHistory func()
	refusals    refusalPacer // which refused requests the audit log records
	// lastTokens is the last successful read of the admin tokens, for
	// read-only requests while the ledger cannot be read (authorize).
	lastTokens atomic.Pointer[readTokens]

	// mu serialises changes. The ledger makes each change atomic, but an
	// audit record's before is read just ahead of the change: holding mu
	// keeps admin changes from interleaving between the two, and keeps
	// publications in ledger order. It also guards hasher (not safe for
	// concurrent use) and rand (a caller's reader may not be).
	mu     sync.Mutex
	hasher *credential.Hasher
	rand   io.Reader
}

// New validates cfg and builds the Server, registering its metrics.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("admin: Config.Store is required")
	case cfg.Hasher == nil:
		return nil, errors.New("admin: Config.Hasher is required")
	case cfg.Publisher == nil:
		return nil, errors.New("admin: Config.Publisher is required")
	}
	s := &Server{
		store: cfg.Store, hasher: cfg.Hasher, pub: cfg.Publisher, reg: cfg.Registry,
		now: cfg.Now, log: cfg.Log, rand: cfg.Rand, holdings: cfg.Holdings, tracing: cfg.Tracing,
		eventLog: cfg.Events, node: cfg.Node, storage: cfg.Storage, history: cfg.History,
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if s.now == nil {
		s.now = func() int64 { return time.Now().UnixNano() }
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	m, err := newMetrics(s.reg)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.scrape = promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	s.handler = s.traced(s.routes())
	return s, nil
}

// Handler is the admin API. Serve serves it with the listener's limits;
// a caller serving it otherwise should give pprof's profile and trace
// their duration beyond its timeouts.
func (s *Server) Handler() http.Handler { return s.handler }

// endpoint is one method of one route. It answers itself on success and
// returns an error otherwise: an *apiError is the answer, anything else is
// logged and answered as internal.
type endpoint func(w http.ResponseWriter, r *http.Request) error

// route is one method of a route: its endpoint and the permission a
// token's role needs for it (roles.go).
type route struct {
	run  endpoint
	need string
}

type methods map[string]route

// get is a GET route every role with read may call.
func get(e endpoint) route { return route{e, permRead} }

// change is a route that needs perm.
func change(e endpoint, perm string) route { return route{e, perm} }

// requestTimeout bounds an admin request's ledger work. A request's work
// does not stop when its client goes quiet: the client may have half-closed
// its side after sending (and still reads the answer), and a change that
// reached the ledger must be audited and published whatever the client
// does. So handlers run under this, not under the connection's context.
const requestTimeout = 30 * time.Second

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, m methods) {
		mux.Handle(pattern, s.instrument(pattern, s.dispatch(m, true)))
	}
	handle("/v1/accounts", methods{http.MethodPost: change(s.createAccount, permAccountCreate), http.MethodGet: get(s.listAccounts)})
	handle("/v1/accounts/{id}", methods{http.MethodGet: get(s.getAccount)})
	handle("/v1/accounts/{id}/children", methods{http.MethodGet: get(s.children)})
	// Closing needs account.close on top: setStatus checks it.
	handle("/v1/accounts/{id}/status", methods{http.MethodPost: change(s.setStatus, permAccountStatus)})
	handle("/v1/accounts/{id}/policy", methods{http.MethodGet: get(s.getPolicy), http.MethodPut: change(s.putPolicy, permAccountPolicy)})
	handle("/v1/accounts/{id}/budget", methods{http.MethodPut: change(s.setBudget, permAccountBudget)})
	handle("/v1/accounts/{id}/deposits", methods{http.MethodPost: change(s.deposit, permAccountDeposit)})
	handle("/v1/accounts/{id}/keys", methods{http.MethodPost: change(s.createKey, permKeyCreate), http.MethodGet: get(s.listKeys)})
	handle("/v1/accounts/{id}/keys/{key_id}", methods{http.MethodDelete: change(s.revokeKey, permKeyRevoke)})
	handle("/v1/accounts/{id}/keys/{key_id}/rotate", methods{http.MethodPost: change(s.rotateKey, permKeyRotate)})
	handle("/v1/accounts/{id}/usage", methods{http.MethodGet: get(s.usage)})
	handle("/v1/platform-tokens", methods{http.MethodPost: change(s.createPlatformToken, permPlatformTokenCreate),
		http.MethodGet: get(s.listPlatformTokens)})
	handle("/v1/platform-tokens/{id}", methods{http.MethodDelete: change(s.revokePlatformToken, permPlatformTokenRevoke)})
	handle("/v1/admin-tokens", methods{http.MethodPost: change(s.createAdminToken, permAdminTokenCreate),
		http.MethodGet: get(s.listAdminTokens)})
	handle("/v1/admin-tokens/{id}", methods{http.MethodDelete: change(s.revokeAdminToken, permAdminTokenRevoke)})
	handle("/v1/whoami", methods{http.MethodGet: route{s.whoami, permNone}})
	handle("/v1/leases", methods{http.MethodGet: get(s.leases)})
	handle("/v1/audit", methods{http.MethodGet: get(s.auditLog)})
	handle("/v1/events", methods{http.MethodGet: get(s.events)})
	handle("/v1/metrics/history", methods{http.MethodGet: route{s.metricsHistory, permMetrics}})
	handle("/metrics", methods{http.MethodGet: route{s.serveMetrics, permMetrics}})
	// The profiler's handlers keep the connection's context: a profile
	// whose client left should stop.
	s.mountPprof(func(pattern string, m methods) {
		mux.Handle(pattern, s.instrument(pattern, s.dispatch(m, false)))
	})
	// Without this exact pattern the mux would redirect /debug/pprof to
	// /debug/pprof/, before authentication.
	mux.Handle("/debug/pprof", s.instrument("unmatched", s.dispatch(methods{}, true)))
	mux.Handle("/healthz", s.instrument("/healthz", http.HandlerFunc(s.health)))
	s.mountUI(mux) // the dashboard (ui.go)
	// Everything else: 404 as a problem (after authentication, so the
	// listener does not reveal which paths exist).
	unmatched := s.instrument("unmatched", s.dispatch(methods{}, true))
	mux.Handle("/", unmatched)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The mux answers a path that is not clean (//x, /a/../b, /./x,
		// "*") with a redirect to its clean form, before any handler
		// runs: a client would follow it without its Authorization, and
		// the redirect itself reveals routes. Such paths are unmatched.
		if !cleanPath(r.URL.Path) {
			unmatched.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// cleanPath reports whether the mux would route p without redirecting it:
// absolute and already in path.Clean's form (a trailing slash allowed).
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	return c == p || (c != "/" && c+"/" == p) // "//" cleans to "/": not clean
}

// dispatch authenticates, then calls the endpoint for the method, or
// answers 405 (404 for unmatched paths, which have no methods), or 403
// when the token's role lacks the route's permission. Requests that change
// something take no query parameters; GET handlers check their own.
// Authentication, and the endpoint when detach, run under requestTimeout
// instead of the connection's context.
func (s *Server) dispatch(m methods, detach bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn := r.Context()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(conn), requestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		who, err := s.authorize(r)
		if err != nil {
			dropBody(w, r)
			s.fail(w, r, err)
			return
		}
		if !detach {
			ctx = conn
		}
		r = r.WithContext(withCaller(withActor(ctx, adminActorPrefix+who.id), who))
		if len(m) == 0 {
			s.fail(w, r, problemf(codeNotFound, "no route for %q", r.URL.Path))
			return
		}
		h, ok := m[r.Method]
		if !ok {
			w.Header().Set("Allow", strings.Join(slices.Sorted(maps.Keys(m)), ", "))
			s.fail(w, r, problemf(codeMethodNotAllowed, "%s does not allow %s", r.URL.Path, methodLabel(r.Method)))
			return
		}
		if err := s.require(r, h.need); err != nil {
			dropBody(w, r)
			s.fail(w, r, err)
			return
		}
		if r.Method != http.MethodGet && r.URL.RawQuery != "" && detach {
			s.fail(w, r, problemf(codeInvalidQuery, "%s %s takes no query parameters", r.Method, r.URL.Path))
			return
		}
		if err := h.run(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

// health: GET /healthz, without authentication, for load balancers and
// orchestrators: 200 {"status":"ok"} while the ledger answers a read and
// the usage spool takes records; else 503 unavailable (the ledger), or
// storage-full / storage-failed (the spool). It says nothing else.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		s.fail(w, r, problemf(codeMethodNotAllowed, "/healthz allows GET and HEAD"))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), healthTimeout)
	defer cancel()
	if _, _, err := s.store.AdminTokenDigest(ctx); err != nil {
		s.log.Warn().Err(err).Msg("admin: health check: the ledger did not answer")
		s.fail(w, r, problemf(codeUnavailable, "not healthy"))
		return
	}
	if s.storage != nil {
		switch s.storage() {
		case StorageFull:
			s.fail(w, r, problemf(codeStorageFull, "the usage spool's filesystem is full: requests that bill are refused until it has room"))
			return
		case StorageFailed:
			s.fail(w, r, problemf(codeStorageFailed, "the usage spool failed a write or sync: requests that bill are refused until a restart"))
			return
		}
	}
	_ = writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}

// healthTimeout bounds the health check's ledger read.
const healthTimeout = 2 * time.Second

// fail answers err, counting it; internal errors are logged and answered
// without detail, since they may name files or internals.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("admin: internal error")
		e = problemf(codeInternal, "the request failed; see the server log")
	}
	s.metrics.errors.WithLabelValues(e.code).Inc()
	writeProblem(w, r, e)
}
