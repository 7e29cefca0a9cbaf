package agentadmission

import (
	"context"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Fixed by the contract.
const (
	// TTL is how long any answer, including a fallback admit, is reused.
	TTL = 5 * time.Second
	// CallTimeout bounds a platform call, and so also how long a request
	// waits for another request's call.
	CallTimeout = 2 * time.Second
)

// DefaultCacheSize is how many agents a Checker remembers by default. A
// service usually is one agent; the bound is there for services that gate
// on a per-request agent id, so unknown ids cannot grow memory.
const DefaultCacheSize = 10000

// tracerName identifies this package's spans.
const tracerName = "github.com/tollgated/tollgated/agentadmission"

// Checker asks the platform whether an agent is admitted, caching answers
// and sharing calls. One Checker serves both middleware flavours and is
// safe for concurrent use. A nil or unengaged Checker admits everything.
type Checker struct {
	cfg      Config
	endpoint string
	server   []attribute.KeyValue // span attributes naming the platform
	engaged  bool

	log       zerolog.Logger
	audit     AuditSink
	tp        trace.TracerProvider
	tracer    trace.Tracer
	now       func() time.Time
	client    *http.Client
	timeout   time.Duration
	cacheSize int
	cache     *cache

	exempt      map[string]struct{}
	httpSubject func(*http.Request) Subject
	fastSubject func(*fasthttp.RequestCtx) Subject
}

// New builds a Checker. It is engaged only when cfg has both URL and Token;
// when exactly one is set it logs one warning and stays a pass-through.
func New(cfg Config, opts ...Option) *Checker {
	c := &Checker{
		cfg:       cfg,
		endpoint:  strings.TrimRight(cfg.URL, "/") + admissionPath,
		engaged:   cfg.engaged(),
		log:       zerolog.New(os.Stderr).With().Timestamp().Logger(),
		audit:     NewJSONSink(os.Stderr),
		now:       time.Now,
		timeout:   CallTimeout,
		cacheSize: DefaultCacheSize,
		exempt:    make(map[string]struct{}),
		client: &http.Client{
			// A redirect is not a 200, so it is a failed call like any
			// other; following it could also carry the token elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
	for _, o := range opts {
		o(c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	c.tracer = c.tp.Tracer(tracerName)
	c.server = serverAttrs(c.endpoint)
	c.cache = newCache(TTL, c.cacheSize)

	switch {
	case cfg.halfSet():
		c.log.Warn().
			Bool("url_set", cfg.URL != "").
			Bool("token_set", cfg.Token != "").
			Msg("admission: needs both " + EnvURL + " and " + EnvToken + "; running without admission")
	case c.engaged && cfg.AgentID == "" && c.httpSubject == nil && c.fastSubject == nil:
		c.log.Warn().Msg("admission: no agent id configured; every check will fail open")
	}
	return c
}

// Enabled reports whether the Checker asks the platform at all.
func (c *Checker) Enabled() bool {
	return c != nil && c.engaged
}

// Check runs admission for s inside an admission.check span and records
// the audit event when the answer is a deny; the caller only has to answer
// the request. An empty s.AgentID means Config.AgentID.
func (c *Checker) Check(ctx context.Context, s Subject) Decision {
	if !c.Enabled() {
		return Decision{}
	}
	if s.AgentID == "" {
		s.AgentID = c.cfg.AgentID
	}
	ctx, span := c.tracer.Start(ctx, "admission.check",
		trace.WithAttributes(attribute.String("admission.agent_id", s.AgentID)))
	defer span.End()

	d := c.decide(ctx, s.AgentID)

	span.SetAttributes(
		attribute.Bool("admission.cached", d.Cached),
		attribute.Bool("admission.failed_open", d.FailedOpen),
	)
	if !d.Denied {
		span.SetAttributes(attribute.String("admission.decision", "admit"))
		return d
	}
	span.SetAttributes(
		attribute.String("admission.decision", "deny"),
		attribute.String("admission.reason", d.Reason),
		attribute.String("admission.scope", d.Scope),
	)
	span.SetStatus(codes.Error, "admission denied: "+d.Reason)
	c.recordDeny(ctx, s, d)
	return d
}

// decide answers from the cache, from another request's call, or from a
// call of its own.
func (c *Checker) decide(ctx context.Context, agent string) Decision {
	d, hit, f, lead := c.cache.lookup(agent, c.now())
	switch {
	case hit:
		d.Cached = true
		return d
	case !lead:
		// Bounded: the leading call gives up after the call timeout.
		<-f.done
		return f.d
	}

	// Until the call returns, the answer is the fail-open one; storing it
	// from a defer means waiters are released even if the call panics.
	d = Decision{FailedOpen: true}
	var stored time.Time
	defer func() {
		if stored.IsZero() {
			stored = c.now()
		}
		c.cache.store(agent, f, d, stored)
	}()

	answer, err := c.ask(ctx, agent)
	stored = c.now()
	if err != nil {
		c.log.Warn().
			Str("agent_id", agent).
			Str("error", err.Error()).
			Str("cached_until", stored.Add(TTL).UTC().Format(time.RFC3339)).
			Msg("admission: call failed, admitting")
		return d
	}
	d = answer
	return d
}

// recordDeny hands a task_admission_denied event to the audit sink.
func (c *Checker) recordDeny(ctx context.Context, s Subject, d Decision) {
	e := Event{
		Event:         EventDenied,
		TS:            c.now().UTC(),
		CorrelationID: s.CorrelationID,
		TaskID:        s.TaskID,
		EntityID:      s.AgentID,
		EntityType:    "agent",
		OrgID:         c.cfg.OrgID,
		WorkspaceID:   c.cfg.WorkspaceID,
		Fields: DenyFields{
			Reason:  d.Reason,
			Scope:   d.Scope,
			Window:  d.Window,
			ResetAt: d.resetAt(),
			Cached:  d.Cached,
		},
	}
	if err := c.audit.Record(ctx, e); err != nil {
		c.log.Warn().Str("agent_id", s.AgentID).Str("error", err.Error()).
			Msg("admission: audit event not recorded")
	}
}

// isExempt reports whether path skips admission.
func (c *Checker) isExempt(path string) bool {
	_, ok := c.exempt[path]
	return ok
}
