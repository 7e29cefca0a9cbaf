package control

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgated/tollgated/control/funding"
)

// Spans of the control plane's slow work: ledger calls, usage exports and
// provisioning pushes. They come from the process's global tracer provider
// (tollgated sets one when OTEL_* variables configure an exporter; without
// one they are no-ops). The shards never make spans.
//
// The provider is looked up per span, not once: a tracer taken from the
// global provider before one is set stays bound to the first provider set.
const tracerName = "github.com/tollgated/tollgated/control"

// startSpan starts an internal span named name under ctx.
func startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return otel.GetTracerProvider().Tracer(tracerName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends span, marking it failed with err, if any.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Attribute keys shared by the control plane's spans.
const (
	attrAccount = attribute.Key("tollgated.account")
	attrLease   = attribute.Key("tollgated.lease_id")
	attrEvents  = attribute.Key("tollgated.usage.events")
	// attrAccounts counts the accounts a provisioning push covers.
	attrAccounts = attribute.Key("tollgated.accounts")
)

// callSpans name the ledger worker's funding calls' spans.
var callSpans = [...]string{funding.CallAcquire: "ledger.acquire", funding.CallExtend: "ledger.extend", funding.CallRelease: "ledger.release"}

// tracedCall is run1 in a span: the ledger call a lease grant, extension
// or release makes. A refusal (no funding left) is an answer, not a
// failure: it is an attribute, not an error status.
func (w *ledgerWorker) tracedCall(c funding.Call) funding.Result {
	name := "ledger.call"
	if int(c.Kind) < len(callSpans) && callSpans[c.Kind] != "" {
		name = callSpans[c.Kind]
	}
	_, span := startSpan(context.Background(), name, attrAccount.String(string(c.Account)),
		attribute.String("tollgated.holder", string(c.Holder)), attribute.Int64("tollgated.units.want", int64(c.Want)))
	r := w.run1(c)
	if id := max(r.Lease.ID, c.Lease); id != 0 {
		span.SetAttributes(attrLease.Int64(int64(id)))
	}
	var err error
	switch r.Outcome {
	case funding.Refused, funding.RefusedInactive:
		span.SetAttributes(attribute.Bool("tollgated.refused", true))
	case funding.OK:
	default:
		err = errors.New(r.Detail)
	}
	endSpan(span, err)
	return r
}

// traced runs push, a provisioning push to the shards, in a span.
func traced(name string, push func() error) error {
	_, span := startSpan(context.Background(), name)
	err := push()
	endSpan(span, err)
	return err
}
