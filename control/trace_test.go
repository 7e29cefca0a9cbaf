package control

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tollgated/tollgated/internal/await"
)

// TestControlPlaneWorkIsTraced: with a tracer provider set, a lease grant
// is a ledger.acquire span naming the account and lease, billing usage an
// export.settle span, and pushing an account change to the shards a
// provision.account span; the shards make none.
func TestControlPlaneWorkIsTraced(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()); tp.Shutdown(context.Background()) })

	nd := newNode(t, 2, LeaseConfig{TTL: time.Minute})
	nd.open("acme", "key-acme", 1_000_000, "")
	nd.waitStatus(0, "key-acme", 200, await.Default)
	acct, err := nd.store.Account(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.prov.AccountChanged(acct); err != nil {
		t.Fatal(err)
	}
	if err := nd.exporter.Export(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"ledger.acquire": false, "export.settle": false, "provision.account": false, "provision.load": false}
	seen := await.Poll(await.Default, func() bool {
		for _, s := range exp.GetSpans() {
			attrs := map[string]string{}
			for _, a := range s.Attributes {
				attrs[string(a.Key)] = a.Value.Emit()
			}
			switch s.Name {
			case "ledger.acquire":
				want[s.Name] = attrs["tollgated.account"] == "acme" && attrs["tollgated.lease_id"] != "" && attrs["tollgated.lease_id"] != "0"
			case "export.settle":
				want[s.Name] = want[s.Name] || attrs["tollgated.usage.events"] != "0"
			case "provision.account":
				want[s.Name] = attrs["tollgated.account"] == "acme"
			case "provision.load":
				want[s.Name] = true
			}
		}
		done := true
		for _, ok := range want {
			done = done && ok
		}
		return done
	})
	if !seen {
		t.Fatalf("spans seen: %v (of %d)", want, len(exp.GetSpans()))
	}
}
