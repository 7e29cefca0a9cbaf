package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tollgated/tollgated/agentadmission"
)

// fakePlatform answers every admission call with body and counts calls.
func fakePlatform(t *testing.T, body string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/admission" || r.Header.Get("Authorization") != "Bearer platform-token" {
			http.Error(w, "bad call", http.StatusBadRequest)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s, &calls
}

func newTestHandler(platformURL, token string) http.Handler {
	c := agentadmission.New(
		agentadmission.Config{URL: platformURL, Token: "platform-token", AgentID: "my-agent"},
		agentadmission.WithExemptPaths("/healthz"),
		agentadmission.WithLogger(zerolog.Nop()),
		agentadmission.WithAuditSink(agentadmission.NewJSONSink(io.Discard)),
	)
	return newHandler(c, token)
}

func send(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader("hello"))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestDeniedAgentStillHealthy(t *testing.T) {
	p, calls := fakePlatform(t, `{"decision":"deny","reason":"cost_limit_exceeded","scope":"agent","window":"daily","reset_at":null}`)
	h := newTestHandler(p.URL, "")

	if rec := send(h, http.MethodGet, "/healthz", ""); rec.Code != http.StatusOK {
		t.Fatalf("/healthz while denied: %d", rec.Code)
	}
	rec := send(h, http.MethodPost, "/invoke", "")
	if rec.Code != http.StatusPaymentRequired || !strings.Contains(rec.Body.String(), `"admission_denied"`) {
		t.Fatalf("/invoke while denied: %d %s", rec.Code, rec.Body)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d platform calls", calls.Load())
	}
}

func TestAdmittedAgentWorks(t *testing.T) {
	p, _ := fakePlatform(t, `{"decision":"admit","reason":"","scope":"","window":"","reset_at":null}`)
	rec := send(newTestHandler(p.URL, ""), http.MethodPost, "/invoke", "")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Body.String(), "did the work") {
		t.Fatalf("/invoke while admitted: %d %s", rec.Code, rec.Body)
	}
}

func TestAuthenticationComesFirst(t *testing.T) {
	p, calls := fakePlatform(t, `{"decision":"admit","reason":"","scope":"","window":"","reset_at":null}`)
	h := newTestHandler(p.URL, "agent-secret")

	if rec := send(h, http.MethodPost, "/invoke", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("unauthenticated: %d", rec.Code)
	}
	if calls.Load() != 0 {
		t.Fatal("unauthenticated request cost a platform call")
	}
	if rec := send(h, http.MethodPost, "/invoke", "Bearer agent-secret"); rec.Code != http.StatusOK {
		t.Fatalf("authenticated: %d", rec.Code)
	}
	if rec := send(h, http.MethodGet, "/healthz", ""); rec.Code != http.StatusOK {
		t.Fatalf("/healthz behind auth: %d", rec.Code)
	}
}
