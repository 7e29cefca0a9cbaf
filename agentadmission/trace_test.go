package agentadmission

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// spanRig is a rig whose spans land in a recorder.
func spanRig(t *testing.T, platformURL string) (*rig, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return newRig(t, platformURL, WithTracerProvider(tp)), sr, tp
}

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			if found != nil {
				t.Fatalf("two %q spans", name)
			}
			found = s
		}
	}
	if found == nil {
		t.Fatalf("no %q span among %d", name, len(spans))
	}
	return found
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestSpans(t *testing.T) {
	p := platform(t, answer(200, denyJSON))
	r, sr, tp := spanRig(t, p.URL)

	// An inbound request already inside a dispatcher-level span.
	ctx, parent := tp.Tracer("test").Start(t.Context(), "a2a.tasks/send")
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/a2a", nil)
	if rec, _ := r.do(req); rec.Code != http.StatusPaymentRequired {
		t.Fatalf("status %d", rec.Code)
	}
	parent.End()

	spans := sr.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want a2a, admission.check and the call", len(spans))
	}
	check := spanNamed(t, spans, "admission.check")
	call := spanNamed(t, spans, "GET /v1/admission")

	if check.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatal("admission.check is not a child of the request's span")
	}
	if check.Status().Code != codes.Error {
		t.Fatalf("deny span status = %v", check.Status())
	}
	if attr(check, "admission.decision").AsString() != "deny" || attr(check, "admission.cached").AsBool() {
		t.Fatalf("check attributes = %v", check.Attributes())
	}

	if call.Parent().SpanID() != check.SpanContext().SpanID() || call.SpanContext().TraceID() != check.SpanContext().TraceID() {
		t.Fatal("platform call is not a child of admission.check")
	}
	if call.SpanKind() != trace.SpanKindClient {
		t.Fatalf("call kind = %v", call.SpanKind())
	}
	if call.Status().Code == codes.Error {
		t.Fatalf("successful call marked %v", call.Status())
	}
	if attr(call, "http.request.method").AsString() != "GET" ||
		attr(call, "http.response.status_code").AsInt64() != 200 ||
		attr(call, "server.address").AsString() != "127.0.0.1" ||
		!strings.HasSuffix(attr(call, "url.full").AsString(), "/v1/admission?agent_id=my-agent") {
		t.Fatalf("call attributes = %v", call.Attributes())
	}

	// A cached deny: the check span alone, still an error.
	sr.Reset()
	r.serve("/a2a")
	spans = sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans on a cache hit, want 1", len(spans))
	}
	check = spanNamed(t, spans, "admission.check")
	if check.Status().Code != codes.Error || !attr(check, "admission.cached").AsBool() {
		t.Fatalf("cached deny span: status %v, attributes %v", check.Status(), check.Attributes())
	}
}

func TestSpansOnAdmitAndFailure(t *testing.T) {
	for _, tc := range []struct {
		name       string
		h          http.HandlerFunc
		callStatus codes.Code
	}{
		{"admit", answer(200, admitJSON), codes.Unset},
		{"platform error", answer(500, ``), codes.Error},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sr, _ := spanRig(t, platform(t, tc.h).URL)
			r.serve("/invoke")
			spans := sr.Ended()
			check := spanNamed(t, spans, "admission.check")
			call := spanNamed(t, spans, "GET /v1/admission")
			if check.Status().Code != codes.Unset {
				t.Fatalf("admit span status = %v", check.Status())
			}
			if call.Status().Code != tc.callStatus {
				t.Fatalf("call span status = %v, want %v", call.Status(), tc.callStatus)
			}
			if call.Parent().SpanID() != check.SpanContext().SpanID() {
				t.Fatal("call is not a child of admission.check")
			}
		})
	}
}

func TestNoSpanForExemptPath(t *testing.T) {
	r, sr, _ := spanRig(t, platform(t, answer(200, denyJSON)).URL)
	r.c.exempt["/healthz"] = struct{}{}
	r.serve("/healthz")
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans for an exempt path", n)
	}
}
