package agentadmission

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// t0 is the fake clock's starting point.
var t0 = time.Date(2026, 6, 27, 8, 15, 22, 0, time.UTC)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// logs captures zerolog output.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines returns every log line, decoded.
func (l *logs) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if s == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", s)
		}
		out = append(out, m)
	}
	return out
}

// warns returns the lines logged at warn with the given message.
func (l *logs) warns(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range l.lines(t) {
		if m["level"] == "warn" && m[zerolog.MessageFieldName] == msg {
			out = append(out, m)
		}
	}
	return out
}

// events collects audit events.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) Record(_ context.Context, ev Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	return nil
}

func (e *events) list() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.all...)
}

// countingTransport counts round trips, which covers calls that never
// reach a server (connection refused).
type countingTransport struct {
	n  atomic.Int64
	rt http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// rig is a Checker wired to fakes, with a platform behind it.
type rig struct {
	c      *Checker
	clock  *clock
	logs   *logs
	events *events
	calls  *countingTransport
}

// newRig builds a Checker for agent "my-agent" against platformURL.
func newRig(t *testing.T, platformURL string, opts ...Option) *rig {
	t.Helper()
	return newRigConfig(t, Config{URL: platformURL, Token: "tok", AgentID: "my-agent"}, opts...)
}

// newRigConfig builds a Checker for cfg with fakes for everything else.
func newRigConfig(t *testing.T, cfg Config, opts ...Option) *rig {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r := &rig{
		clock:  newClock(),
		logs:   &logs{},
		events: &events{},
		calls:  &countingTransport{rt: tr},
	}
	base := []Option{
		WithClock(r.clock.Now),
		WithLogger(zerolog.New(r.logs)),
		WithAuditSink(r.events),
		WithHTTPClient(&http.Client{
			Transport: r.calls,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}),
	}
	r.c = New(cfg, append(base, opts...)...)
	return r
}

// serve sends one GET for path through the net/http middleware and reports
// the response and whether the wrapped handler ran.
func (r *rig) serve(path string) (*httptest.ResponseRecorder, bool) {
	return r.do(httptest.NewRequest(http.MethodGet, path, nil))
}

// do sends req through the net/http middleware.
func (r *rig) do(req *http.Request) (*httptest.ResponseRecorder, bool) {
	var ran atomic.Bool
	h := r.c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ran.Store(true)
		w.WriteHeader(http.StatusOK)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec, ran.Load()
}

// answer returns a platform handler that always sends status and body.
func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}
}

// denyOnly returns a platform handler that denies agent and admits the rest.
func denyOnly(agent string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("agent_id") == agent {
			answer(200, denyJSON)(w, r)
			return
		}
		answer(200, admitJSON)(w, r)
	}
}

// platform starts a test platform on 127.0.0.1.
func platform(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

const (
	denyJSON  = `{"decision":"deny","reason":"cost_limit_exceeded","scope":"workspace","window":"daily","reset_at":"2026-06-28T14:00:00Z"}`
	admitJSON = `{"decision":"admit","reason":"","scope":"","window":"","reset_at":null}`
)
