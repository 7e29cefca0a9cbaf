package agentadmission

import (
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

// Option adjusts a Checker built by New or FromEnv.
type Option func(*Checker)

// Subject names whom an inbound request is admitted for. CorrelationID and
// TaskID only enrich the audit event; either may be empty.
type Subject struct {
	AgentID       string
	CorrelationID string
	TaskID        string
}

// WithLogger sets where warn lines go. The default writes JSON to stderr.
func WithLogger(l zerolog.Logger) Option {
	return func(c *Checker) { c.log = l }
}

// WithAuditSink sets where task_admission_denied events go. The default is
// a JSONSink on stderr.
func WithAuditSink(s AuditSink) Option {
	return func(c *Checker) { c.audit = s }
}

// WithTracerProvider sets the provider of the admission tracer. The default
// is the global otel provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Checker) { c.tp = tp }
}

// WithClock replaces time.Now for cache expiry, Retry-After and event
// timestamps. The call timeout still runs on the real clock.
func WithClock(now func() time.Time) Option {
	return func(c *Checker) { c.now = now }
}

// WithHTTPClient sets the client for platform calls, e.g. for custom TLS.
// The call timeout is applied through the request context either way.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Checker) { c.client = hc }
}

// WithTimeout overrides the 2 s call timeout. The contract has no such knob;
// this exists so tests need not wait 2 s, and should stay unset otherwise.
func WithTimeout(d time.Duration) Option {
	return func(c *Checker) { c.timeout = d }
}

// WithCacheSize bounds how many agents the cache remembers (default
// DefaultCacheSize). When full, the entry stored longest ago goes first,
// which, with one TTL for all, is also the one that expires first.
func WithCacheSize(n int) Option {
	return func(c *Checker) { c.cacheSize = n }
}

// WithExemptPaths lists request paths that skip admission entirely, such as
// liveness and readiness probes. Paths match exactly.
func WithExemptPaths(paths ...string) Option {
	return func(c *Checker) {
		for _, p := range paths {
			c.exempt[p] = struct{}{}
		}
	}
}

// WithHTTPSubject derives the subject of a net/http request, typically from
// what the authentication middleware put in its context. An empty AgentID
// falls back to Config.AgentID.
func WithHTTPSubject(f func(*http.Request) Subject) Option {
	return func(c *Checker) { c.httpSubject = f }
}

// WithFastHTTPSubject is WithHTTPSubject for the fasthttp middleware.
func WithFastHTTPSubject(f func(*fasthttp.RequestCtx) Subject) Option {
	return func(c *Checker) { c.fastSubject = f }
}
