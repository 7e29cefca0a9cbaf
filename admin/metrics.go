package admin

import (
	"fmt"
	"net/http"
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
	}
	for _, c := range []prometheus.Collector{m.requests, m.mutations, m.errors} {
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

// instrument counts every request to route by method and status.
func (s *Server) instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(status)).Inc()
	})
}
