package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Tracing is configured by the standard OTEL_* environment variables, read
// by the OpenTelemetry SDK and its OTLP exporters themselves (endpoint,
// headers, timeout, sampler, batch sizes, resource). tollgated decides
// only whether to export at all: with no OTEL_* variable set there is no
// exporter and no SDK, and every span is a no-op. See docs/OPERATIONS.md.

// tracingPlan is what the environment asks for.
type tracingPlan struct {
	on       bool
	protocol string // "grpc" or "http/protobuf"
	why      string // why tracing is off, for the log
}

// planTracing reads environ (as os.Environ gives it). Traces are exported
// when an OTLP endpoint is named (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER is otlp, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says no.
// Any other OTEL_* variable alone sends nothing anywhere.
func planTracing(environ []string) (tracingPlan, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "OTEL_") {
			env[k] = v
		}
	}
	if len(env) == 0 {
		return tracingPlan{why: "no OTEL_* variable is set"}, nil
	}
	if strings.EqualFold(env["OTEL_SDK_DISABLED"], "true") {
		return tracingPlan{why: "OTEL_SDK_DISABLED=true"}, nil
	}
	switch exporter := env["OTEL_TRACES_EXPORTER"]; exporter {
	case "none":
		return tracingPlan{why: "OTEL_TRACES_EXPORTER=none"}, nil
	case "", "otlp":
		if exporter == "" && env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "" && env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "" {
			return tracingPlan{why: "no OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT) and OTEL_TRACES_EXPORTER is not otlp"}, nil
		}
	default:
		return tracingPlan{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: tollgated exports traces with otlp, or none", exporter)
	}
	protocol := env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
	if protocol == "" {
		protocol = env["OTEL_EXPORTER_OTLP_PROTOCOL"]
	}
	switch protocol {
	case "":
		protocol = "http/protobuf" // the specification's default
	case "grpc", "http/protobuf":
	default:
		return tracingPlan{}, fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf", protocol)
	}
	return tracingPlan{on: true, protocol: protocol}, nil
}

// startTracing sets the process's tracer provider and W3C propagation as
// environ asks, and returns the function that flushes and stops it (a
// no-op when tracing is off).
func startTracing(environ []string, log zerolog.Logger) (stop func(), err error) {
	plan, err := planTracing(environ)
	if err != nil {
		return nil, err
	}
	if !plan.on {
		log.Debug().Str("reason", plan.why).Msg("tracing off")
		return func() {}, nil
	}
	ctx := context.Background()
	var exp sdktrace.SpanExporter
	if plan.protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	ver, _, _ := buildInfo()
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "tollgated"), attribute.String("service.version", ver)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil {
		log.Warn().Err(err).Msg("tracing: part of the resource could not be detected")
	}
	// The batch processor's queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE,
	// 2048 by default): when the collector cannot keep up, new spans are
	// dropped, never waited for.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Err(err).Msg("tracing: export failed")
	}))
	log.Info().Str("protocol", plan.protocol).Msg("tracing on: exporting spans with OTLP")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("tracing: flushing the last spans failed")
		}
	}, nil
}
