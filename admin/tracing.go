package admin

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the admin API's spans' instrumentation scope.
const tracerName = "github.com/tollgated/tollgated/admin"

// traceContext reads and writes W3C traceparent and tracestate. It is
// fixed, not the process's global propagator (which does nothing unless
// set): an admin request's traceparent is always honoured.
var traceContext = propagation.TraceContext{}

// traced gives every admin request a server span, a child of the
// request's traceparent when it has a valid one, named by method and
// route pattern once the mux has routed it ("GET /v1/accounts/{id}"). The
// span is in the request's context, so work a handler starts under it is
// its child. With tracing off (a no-op provider, the default) it costs a
// header read and a non-recording span.
func (s *Server) traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tp := s.tracing
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tp.Tracer(tracerName).Start(ctx, "admin "+methodLabel(r.Method),
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", methodLabel(r.Method)),
				attribute.String("url.path", r.URL.Path)))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w}
		r = r.WithContext(ctx)
		next.ServeHTTP(rec, r)
		route := r.Pattern // set by the mux
		if route == "" || route == "/" || route == "/debug/pprof" {
			route = "unmatched" // as in tollgated_admin_requests_total
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetName("admin " + methodLabel(r.Method) + " " + route)
		span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", status))
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
	})
}
