package agentadmission

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tollgated/tollgated/internal/await"
)

const failMsg = "admission: call failed, admitting"

// refusedURL returns a URL on 127.0.0.1 where nothing listens.
func refusedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// hang never answers; the caller's timeout ends the call.
func hang(w http.ResponseWriter, r *http.Request) {
	<-r.Context().Done()
}

func TestFailOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens
		wantErr string
	}{
		{"connection refused", nil, "connection refused"},
		{"timeout", hang, "context deadline exceeded"},
		{"401 bad token", answer(401, `{"error":"unauthorized"}`), "401"},
		{"404 unknown agent", answer(404, ``), "404"},
		{"500", answer(500, denyJSON), "500"},
		{"503", answer(503, ``), "503"},
		{"302 redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, "302"},
		{"bad JSON", answer(200, `{"decision":`), "bad answer"},
		{"missing decision", answer(200, `{"reason":"r","scope":"org","window":"w","reset_at":null}`), "missing decision"},
		{"unknown decision ADMIT", answer(200, `{"decision":"ADMIT","reason":"","scope":"","window":"","reset_at":null}`), `unknown decision "ADMIT"`},
		{"empty reset_at", answer(200, `{"decision":"deny","reason":"r","scope":"org","window":"daily","reset_at":""}`), "reset_at"},
		{"malformed reset_at", answer(200, `{"decision":"deny","reason":"r","scope":"org","window":"daily","reset_at":"28/06/2026 14:00"}`), "reset_at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := refusedURL(t)
			if tc.handler != nil {
				url = platform(t, tc.handler).URL
			}
			r := newRig(t, url, WithTimeout(100*time.Millisecond))

			rec, ran := r.serve("/invoke")
			if !ran || rec.Code != http.StatusOK {
				t.Fatalf("not admitted: ran=%v status=%d", ran, rec.Code)
			}
			warns := r.logs.warns(t, failMsg)
			if len(warns) != 1 {
				t.Fatalf("%d warn lines, want 1: %v", len(warns), r.logs.lines(t))
			}
			w := warns[0]
			if w["agent_id"] != "my-agent" {
				t.Errorf("agent_id = %v", w["agent_id"])
			}
			if e, _ := w["error"].(string); !strings.Contains(e, tc.wantErr) {
				t.Errorf("error = %q, want it to mention %q", e, tc.wantErr)
			}
			if w["cached_until"] != t0.Add(TTL).Format(time.RFC3339) {
				t.Errorf("cached_until = %v, want %s", w["cached_until"], t0.Add(TTL).Format(time.RFC3339))
			}
			if n := r.calls.n.Load(); n != 1 {
				t.Fatalf("%d calls, want 1", n)
			}

			// The fallback admit is cached for the TTL: no call, no line.
			r.clock.Set(t0.Add(TTL - 100*time.Millisecond))
			if rec, ran := r.serve("/invoke"); !ran || rec.Code != http.StatusOK {
				t.Fatalf("cached fallback not admitted: status %d", rec.Code)
			}
			if n := r.calls.n.Load(); n != 1 {
				t.Fatalf("%d calls within the TTL, want 1", n)
			}
			if n := len(r.logs.warns(t, failMsg)); n != 1 {
				t.Fatalf("%d warn lines within the TTL, want 1", n)
			}

			// And no longer: the next failed call logs its own line.
			r.clock.Set(t0.Add(TTL))
			r.serve("/invoke")
			if n := r.calls.n.Load(); n != 2 {
				t.Fatalf("%d calls after the TTL, want 2", n)
			}
			if n := len(r.logs.warns(t, failMsg)); n != 2 {
				t.Fatalf("%d warn lines after the TTL, want 2", n)
			}
		})
	}
}

func TestCacheTTL(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		code int
	}{
		{"admit", admitJSON, http.StatusOK},
		{"deny", denyJSON, http.StatusPaymentRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, platform(t, answer(200, tc.body)).URL)
			for _, step := range []struct {
				at    time.Duration
				calls int64
			}{
				{0, 1},
				{4900 * time.Millisecond, 1}, // hit
				{TTL, 2},                     // expired exactly at 5 s
				{TTL + 4900*time.Millisecond, 2},
				{2*TTL + time.Second, 3},
			} {
				r.clock.Set(t0.Add(step.at))
				rec, _ := r.serve("/invoke")
				if rec.Code != tc.code {
					t.Fatalf("at %v: status %d, want %d", step.at, rec.Code, tc.code)
				}
				if n := r.calls.n.Load(); n != step.calls {
					t.Fatalf("at %v: %d calls, want %d", step.at, n, step.calls)
				}
			}
		})
	}
}

func TestSingleFlight(t *testing.T) {
	var calls atomic.Int64
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	p := platform(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			answer(200, admitJSON)(w, r)
			return
		}
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
		answer(200, denyJSON)(w, r)
	}))
	r := newRig(t, p.URL)
	r.serve("/invoke") // admit cached at t0
	r.clock.Set(t0.Add(6 * time.Second))

	const n = 100
	var started, done sync.WaitGroup
	started.Add(n)
	codes := make([]int, n)
	bodies := make([]string, n)
	for i := range n {
		done.Go(func() {
			started.Done()
			rec, _ := r.serve("/invoke")
			codes[i], bodies[i] = rec.Code, rec.Body.String()
		})
	}
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("no platform call after the cache expired")
	}
	started.Wait()
	// Let the herd pile up behind the call: all but its leader parked on
	// the flight. Without single flight they would each be in a call of
	// their own, and the platform would count them.
	await.True(t, "the herd waiting on the one call", func() bool { return waitingOnAFlight() == n-1 })
	close(release)
	done.Wait()

	if got := calls.Load(); got != 2 {
		t.Fatalf("%d platform calls, want 2 (one before expiry, one for the herd)", got)
	}
	for i := range n {
		if codes[i] != http.StatusPaymentRequired || bodies[i] != bodies[0] {
			t.Fatalf("request %d got %d %s; request 0 got %d %s", i, codes[i], bodies[i], codes[0], bodies[0])
		}
	}
}

func TestWaitersBoundedByTimeout(t *testing.T) {
	r := newRig(t, platform(t, http.HandlerFunc(hang)).URL, WithTimeout(150*time.Millisecond))
	start := time.Now()
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 20 {
		wg.Go(func() {
			if rec, ran := r.serve("/invoke"); ran && rec.Code == http.StatusOK {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if el := time.Since(start); el > time.Second {
		t.Fatalf("waiters took %v with a 150ms timeout", el)
	}
	if admitted.Load() != 20 {
		t.Fatalf("%d of 20 admitted", admitted.Load())
	}
	if n := r.calls.n.Load(); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
	if n := len(r.logs.warns(t, failMsg)); n != 1 {
		t.Fatalf("%d warn lines, want 1", n)
	}
}

func TestCallOutlivesCanceledRequest(t *testing.T) {
	r := newRig(t, platform(t, answer(200, denyJSON)).URL)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// The call is shared with other waiters, so the request that started
	// it going away must not turn the answer into a fallback admit.
	if d := r.c.Check(ctx, Subject{}); !d.Denied {
		t.Fatalf("decision = %+v, want the platform's deny", d)
	}
	if n := len(r.logs.warns(t, failMsg)); n != 0 {
		t.Fatalf("%d warn lines", n)
	}
}

func TestHalfConfigured(t *testing.T) {
	var calls atomic.Int64
	p := platform(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		answer(200, denyJSON)(w, r)
	}))
	for _, tc := range []struct {
		name  string
		cfg   Config
		warns int
	}{
		{"url only", Config{URL: p.URL, AgentID: "a"}, 1},
		{"token only", Config{Token: "tok", AgentID: "a"}, 1},
		{"neither", Config{AgentID: "a"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &logs{}
			c := New(tc.cfg, WithLogger(zerolog.New(l)))
			lines := l.lines(t)
			if len(lines) != tc.warns {
				t.Fatalf("%d log lines at start, want %d: %v", len(lines), tc.warns, lines)
			}
			for _, line := range lines {
				if line["level"] != "warn" {
					t.Fatalf("line is not a warning: %v", line)
				}
			}
			if c.Enabled() {
				t.Fatal("enabled")
			}
			r := &rig{c: c}
			for range 3 {
				if rec, ran := r.serve("/invoke"); !ran || rec.Code != http.StatusOK {
					t.Fatalf("not passed through: status %d", rec.Code)
				}
			}
			if calls.Load() != 0 {
				t.Fatalf("%d platform calls", calls.Load())
			}
			if n := len(l.lines(t)); n != tc.warns {
				t.Fatalf("%d log lines after traffic, want %d", n, tc.warns)
			}
		})
	}
}

func TestNoAgentID(t *testing.T) {
	r := newRigConfig(t, Config{URL: refusedURL(t), Token: "tok"})
	if n := len(r.logs.lines(t)); n != 1 {
		t.Fatalf("%d start-up lines, want 1 warning about the missing agent id", n)
	}
	if rec, ran := r.serve("/invoke"); !ran || rec.Code != http.StatusOK {
		t.Fatalf("not admitted: %d", rec.Code)
	}
	warns := r.logs.warns(t, failMsg)
	if len(warns) != 1 || warns[0]["error"] != errNoAgent.Error() {
		t.Fatalf("warn lines = %v", warns)
	}
	if n := r.calls.n.Load(); n != 0 {
		t.Fatalf("%d calls", n)
	}
}

func TestSubjectPerRequest(t *testing.T) {
	r := newRig(t, platform(t, denyOnly("spender")).URL, WithHTTPSubject(func(req *http.Request) Subject {
		return Subject{AgentID: req.Header.Get("X-Agent")}
	}))
	send := func(agent string) int {
		req, _ := http.NewRequest(http.MethodGet, "/invoke", nil)
		if agent != "" {
			req.Header.Set("X-Agent", agent)
		}
		rec, _ := r.do(req)
		return rec.Code
	}
	for range 2 {
		if c := send("spender"); c != http.StatusPaymentRequired {
			t.Fatalf("spender: %d", c)
		}
		if c := send("saver"); c != http.StatusOK {
			t.Fatalf("saver: %d", c)
		}
		if c := send(""); c != http.StatusOK {
			t.Fatalf("default agent: %d", c)
		}
	}
	// One call per agent: spender, saver and the configured my-agent.
	if n := r.calls.n.Load(); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
}

func TestExemptPaths(t *testing.T) {
	r := newRig(t, platform(t, answer(200, denyJSON)).URL, WithExemptPaths("/healthz", "/readyz"))
	for _, path := range []string{"/healthz", "/readyz"} {
		if rec, ran := r.serve(path); !ran || rec.Code != http.StatusOK {
			t.Fatalf("%s gated: %d", path, rec.Code)
		}
	}
	if n := r.calls.n.Load(); n != 0 {
		t.Fatalf("%d calls for exempt paths", n)
	}
	if rec, ran := r.serve("/healthz/deep"); ran || rec.Code != http.StatusPaymentRequired {
		t.Fatalf("exemption is not exact: %d", rec.Code)
	}
}

func TestAuditOnEveryDeny(t *testing.T) {
	p := platform(t, answer(200, denyJSON))
	r := newRigConfig(t, Config{URL: p.URL, Token: "tok", AgentID: "my-agent", OrgID: "org-7", WorkspaceID: "ws-3"},
		WithHTTPSubject(func(req *http.Request) Subject {
			return Subject{CorrelationID: req.Header.Get("X-Correlation-Id"), TaskID: req.Header.Get("X-Task-Id")}
		}))
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, "/a2a", nil)
		req.Header.Set("X-Correlation-Id", "9b3d")
		req.Header.Set("X-Task-Id", "task-42")
		if rec, _ := r.do(req); rec.Code != http.StatusPaymentRequired {
			t.Fatalf("status %d", rec.Code)
		}
	}
	send()
	r.clock.Set(t0.Add(4 * time.Second))
	send()

	evs := r.events.list()
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	reset := time.Date(2026, 6, 28, 14, 0, 0, 0, time.UTC)
	for i, ev := range evs {
		cached := i == 1
		if ev.Event != "task_admission_denied" || ev.EntityID != "my-agent" || ev.EntityType != "agent" ||
			ev.OrgID != "org-7" || ev.WorkspaceID != "ws-3" ||
			ev.CorrelationID != "9b3d" || ev.TaskID != "task-42" {
			t.Fatalf("event %d = %+v", i, ev)
		}
		if want := t0.Add(time.Duration(i) * 4 * time.Second); !ev.TS.Equal(want) {
			t.Fatalf("event %d ts = %v, want %v", i, ev.TS, want)
		}
		f := ev.Fields
		if f.Reason != "cost_limit_exceeded" || f.Scope != "workspace" || f.Window != "daily" ||
			f.ResetAt == nil || !f.ResetAt.Equal(reset) || f.Cached != cached {
			t.Fatalf("event %d fields = %+v, want cached=%v", i, f, cached)
		}
	}
	if n := r.calls.n.Load(); n != 1 {
		t.Fatalf("%d calls", n)
	}
}

func TestNoAuditWithoutDeny(t *testing.T) {
	for _, body := range []string{admitJSON, `{"decision":"deny"}`} {
		r := newRig(t, platform(t, answer(200, body)).URL)
		r.serve("/invoke")
		if evs := r.events.list(); len(evs) != 0 {
			t.Fatalf("answer %s recorded %v", body, evs)
		}
	}
}

type failingSink struct{}

func (failingSink) Record(context.Context, Event) error { return errors.New("disk full") }

func TestAuditFailureKeepsDeny(t *testing.T) {
	r := newRig(t, platform(t, answer(200, denyJSON)).URL, WithAuditSink(failingSink{}))
	if rec, ran := r.serve("/invoke"); ran || rec.Code != http.StatusPaymentRequired {
		t.Fatalf("status %d, ran %v", rec.Code, ran)
	}
	if n := len(r.logs.warns(t, "admission: audit event not recorded")); n != 1 {
		t.Fatalf("%d audit warnings", n)
	}
}

// waitingOnAFlight counts the goroutines that wait in decide for another
// request's platform call: parked on a channel there, with no call of
// their own on the stack.
func waitingOnAFlight() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("[chan receive")) && bytes.Contains(g, []byte("(*Checker).decide(")) &&
			!bytes.Contains(g, []byte("(*Checker).ask(")) {
			n++
		}
	}
	return n
}
