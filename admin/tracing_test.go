package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgated/tollgated/credential"
)

// tracedServer is an admin Server whose spans go to the returned recorder.
func tracedServer(t *testing.T) (*Server, *tracetest.SpanRecorder, string) {
	t.Helper()
	store := openStore(t)
	token, _, err := EnsureAdminToken(context.Background(), store, "", strings.NewReader(strings.Repeat("A", 32)))
	if err != nil {
		t.Fatal(err)
	}
	hasher, err := credential.NewHasher(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	s, err := New(Config{Store: store, Hasher: hasher, Publisher: newRecordingPublisher(), Tracing: tp})
	if err != nil {
		t.Fatal(err)
	}
	return s, rec, token
}

// TestAdminRequestsAreSpansUnderTheirTraceparent: a request carrying a
// W3C traceparent is served in a server span of that trace, a child of
// the caller's span, named by its route pattern with its status; one
// without starts a trace of its own.
func TestAdminRequestsAreSpansUnderTheirTraceparent(t *testing.T) {
	s, rec, token := tracedServer(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req := httptest.NewRequest("GET", "/v1/accounts/nobody", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusNotFound {
		t.Fatalf("status %d", w.Code)
	}
	req = httptest.NewRequest("POST", "/v1/accounts", strings.NewReader(`{"id":"acme"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	s.Handler().ServeHTTP(httptest.NewRecorder(), req)

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	got := spans[0]
	if got.Name() != "admin GET /v1/accounts/{id}" || got.SpanKind() != trace.SpanKindServer {
		t.Fatalf("span %q kind %v", got.Name(), got.SpanKind())
	}
	if got.SpanContext().TraceID().String() != traceID || got.Parent().SpanID().String() != parentID || !got.Parent().IsRemote() {
		t.Fatalf("span in trace %s under %s, want %s under %s", got.SpanContext().TraceID(), got.Parent().SpanID(), traceID, parentID)
	}
	attrs := map[string]string{}
	for _, a := range got.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["http.route"] != "/v1/accounts/{id}" || attrs["http.response.status_code"] != "404" || attrs["http.request.method"] != "GET" {
		t.Fatalf("attributes %v", attrs)
	}
	own := spans[1]
	if own.Name() != "admin POST /v1/accounts" || own.Parent().IsValid() || own.SpanContext().TraceID().String() == traceID {
		t.Fatalf("untraced request: span %q parent %v", own.Name(), own.Parent())
	}
}
