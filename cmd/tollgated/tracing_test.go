//go:build linux

package main

import (
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tollgated/tollgated/internal/await"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestPlanTracingFromTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		env      []string
		on       bool
		protocol string
		err      bool
	}{
		{env: nil},
		{env: []string{"PATH=/bin", "TOLLGATED_LISTEN=x"}},
		{env: []string{"OTEL_SERVICE_NAME=gate"}}, // names, but sends nowhere
		{env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}, on: true, protocol: "http/protobuf"},
		{env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, on: true, protocol: "grpc"},
		{env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf"}, on: true, protocol: "http/protobuf"},
		{env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER=none"}},
		{env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_SDK_DISABLED=true"}},
		{env: []string{"OTEL_TRACES_EXPORTER=zipkin"}, err: true},
		{env: []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}, err: true},
	} {
		p, err := planTracing(c.env)
		if (err != nil) != c.err || p.on != c.on || p.protocol != c.protocol {
			t.Errorf("%v: plan %+v, error %v", c.env, p, err)
		}
	}
}

// TestNoOTELVariablesNoTracing: without OTEL_* variables, starting tracing
// installs no SDK: the process's provider stays the default no-op one,
// whose spans record nothing and carry no trace id, so nothing can be
// exported.
func TestNoOTELVariablesNoTracing(t *testing.T) {
	stop, err := startTracing([]string{"PATH=/bin"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tp := otel.GetTracerProvider()
	if _, sdk := tp.(*sdktrace.TracerProvider); sdk {
		t.Fatal("an SDK tracer provider was installed")
	}
	_, span := tp.Tracer("test").Start(t.Context(), "x")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("a span records without OTEL_* variables")
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver on loopback that keeps the
// spans it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string][]string // span name → trace ids (hex)
	url   string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{spans: map[string][]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collector.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					rc.spans[s.Name] = append(rc.spans[s.Name], hex.EncodeToString(s.TraceId))
				}
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
		w.Write(b)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rc.url = "http://" + ln.Addr().String()
	return rc
}

func (rc *otlpReceiver) traces(name string) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.spans[name]...)
}

// TestDaemonExportsSpansWithOTLP: a real daemon given an OTLP endpoint
// exports a span for an admin request, in the trace its traceparent names,
// and spans for the control plane's ledger calls and usage export.
func TestDaemonExportsSpansWithOTLP(t *testing.T) {
	rc := startOTLPReceiver(t)
	p := startProcEnv(t, t.TempDir(), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rc.url, "OTEL_BSP_SCHEDULE_DELAY=50",
		"OTEL_SERVICE_NAME=tollgated-test"})
	key := p.provision("acme", 1_000_000, 1)
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	req, _ := http.NewRequest("GET", "http://"+p.adm+"/v1/accounts/acme", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	req.Header.Set("traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	check, _ := http.NewRequest("POST", "http://"+p.listen+"/v1/check", strings.NewReader(`{"workload":[{"op":"requests","count":1}]}`))
	check.Header.Set("Authorization", "Bearer "+key)
	if resp, err = http.DefaultClient.Do(check); err != nil || resp.StatusCode != 200 {
		t.Fatalf("check: %v %v", err, resp)
	}
	resp.Body.Close()
	var admin []string
	if !await.Poll(await.Default, func() bool {
		admin = rc.traces("admin GET /v1/accounts/{id}")
		return len(admin) > 0 && len(rc.traces("ledger.acquire")) > 0 && len(rc.traces("export.settle")) > 0 &&
			len(rc.traces("provision.account")) > 0
	}) {
		rc.mu.Lock()
		t.Fatalf("spans received: %v", rc.spans)
	}
	if admin[0] != traceID {
		t.Fatalf("admin span in trace %s, want the traceparent's %s", admin[0], traceID)
	}
	p.stop()
}
