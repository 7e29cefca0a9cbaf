package admin

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the admin API's own series. Labels are bounded: route is a
// registered pattern (or "unmatched"), method one of a fixed set, code an
// HTTP status or one of the stable problem codes.
type metrics struct {
	requests  *prometheus.CounterVec // route, method, code (HTTP status)
	mutations *prometheus.CounterVec // action: changes that reached the ledger
	errors    *prometheus.CounterVec // code: problem codes, plus publish-failed and audit-failed
	conns     prometheus.Gauge       // open admin connections
	evicted   prometheus.Counter     // connections closed at the bound to make room
	panics    prometheus.Counter     // handlers that panicked (answered 500)
	forbidden *prometheus.CounterVec // permission: requests refused 403 for want of it
}

// Codes counted in errors besides the problem codes: a change stored in
// the ledger whose publication or audit record then failed.
const (
	codePublishFailed = "publish-failed"
	codeAuditFailed   = "audit-failed"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgated_admin_requests_total",
			Help: "Admin API requests by route pattern, method and HTTP status.",
		}, []string{"route", "method", "code"}),
		mutations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgated_admin_mutations_total",
			Help: "Admin changes stored in the ledger, by audit action.",
		}, []string{"action"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgated_admin_errors_total",
			Help: "Admin API errors by problem code; publish-failed and audit-failed count stored changes whose follow-up failed.",
		}, []string{"code"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgated_admin_connections",
			Help: "Open connections to the admin listener (at most its connection limit).",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgated_admin_connections_evicted_total",
			Help: "Admin connections closed at the connection limit to make room for a new one: each had waited longest with no request in progress (no whole request head yet, or idle).",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgated_admin_panics_total",
			Help: "Admin requests whose handler panicked; each was answered 500 internal and logged with its stack.",
		}),
		forbidden: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgated_admin_forbidden_total",
			Help: "Admin requests refused 403 forbidden, by the permission the token's role lacked; each is in the audit log as request.forbidden.",
		}, []string{"permission"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.mutations, m.errors, m.conns, m.evicted, m.panics, m.forbidden} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: registering metrics: %w", err)
		}
	}
	return m, nil
}

// methodLabel keeps the method label bounded: a client can send any token
// as a method, and each would otherwise become a series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// statusRecorder remembers the status a handler wrote, for the requests
// counter.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (pprof's
// profile and trace handlers extend their write deadline through it).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush passes flushes through for streaming handlers.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// instrument counts every request to route by method and status, and
// turns a handler's panic into a logged, counted 500 (see recoverPanic).
func (s *Server) instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		func() {
			defer s.recoverPanic(rec, r)
			next.ServeHTTP(rec, r)
		}()
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(status)).Inc()
	})
}

// recoverPanic answers a panicking handler 500 internal (when it has not
// answered yet), logs the stack and counts it. A panic cannot leave the
// ledger half-changed (each change is one transaction); it can leave a
// stored change unaudited or unpublished, which the next change to the
// account, or repeating the request, publishes. Answering beats dropping
// the connection, which is what net/http would do; the count makes it
// loud, and the fuzz targets assert it stays 0. http.ErrAbortHandler is
// net/http's way to abort a response and passes through.
func (s *Server) recoverPanic(w *statusRecorder, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	s.metrics.panics.Inc()
	s.log.Error().Str("method", r.Method).Str("path", r.URL.Path).Str("panic", fmt.Sprint(v)).
		Str("stack", string(debug.Stack())).Msg("admin: handler panicked")
	if w.status == 0 {
		s.fail(w, r, problemf(codeInternal, "the request failed; see the server log"))
	}
}
