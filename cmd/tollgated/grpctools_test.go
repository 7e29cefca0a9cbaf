package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/internal/daemontest"
)

// Pinned versions of the third-party clients the gRPC listener is tried
// with: grpcurl (reflection, any method) and envoyproxy/ratelimit's own
// client of the rate-limit service.
const (
	grpcurlPkg   = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3"
	rlsClientPkg = "github.com/envoyproxy/ratelimit/src/client_cmd@v1.4.1-0.20260122083618-3fb702589d36"
)

func runTool(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestThirdPartyGRPCClientsTalkToTheDaemon: grpcurl lists the services by
// reflection and calls each; envoyproxy/ratelimit's client_cmd gets OK
// for a funded account and OVER_LIMIT for an unknown one.
func TestThirdPartyGRPCClientsTalkToTheDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds third-party tools and starts a real process")
	}
	t.Parallel()
	bin := t.TempDir()
	grpcurl := daemontest.Tool(t, bin, grpcurlPkg)
	client := daemontest.Tool(t, bin, rlsClientPkg)

	p := startProc(t, t.TempDir(), "--grpc-listen", "127.0.0.1:0")
	key := p.provision("tools", 100_000, 10)
	p.gatewayPolicy("tools", 10, 0, 0)
	addr := grpcConn(t, p).Target()

	out := runTool(t, grpcurl, "-plaintext", addr, "list")
	for _, svc := range []string{"envoy.service.ratelimit.v3.RateLimitService", "envoy.service.auth.v3.Authorization", "grpc.health.v1.Health"} {
		if !strings.Contains(out, svc) {
			t.Fatalf("grpcurl list: no %s in\n%s", svc, out)
		}
	}
	out = runTool(t, grpcurl, "-plaintext", "-d", `{"service":""}`, addr, "grpc.health.v1.Health/Check")
	if !strings.Contains(out, `"SERVING"`) {
		t.Fatalf("health: %s", out)
	}
	out = runTool(t, grpcurl, "-plaintext", "-d", `{"domain":"tollgated","descriptors":[{"entries":[{"key":"account","value":"tools"},{"key":"path","value":"/v1/chat"},{"key":"method","value":"POST"}]}],"hits_addend":3}`,
		addr, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	if !strings.Contains(out, `"overallCode": "OK"`) || !strings.Contains(out, `"value": "30"`) {
		t.Fatalf("ShouldRateLimit with 3 hits (30 units): %s", out)
	}
	out = runTool(t, grpcurl, "-plaintext", "-d", `{"attributes":{"request":{"http":{"method":"GET","path":"/v1/x","headers":{"authorization":"Bearer `+key+`"}}}}}`,
		addr, "envoy.service.auth.v3.Authorization/Check")
	if !strings.Contains(out, `"okResponse"`) || !strings.Contains(out, `"value": "tools"`) {
		t.Fatalf("Check: %s", out)
	}

	out = runTool(t, client, "-dial_string", addr, "-domain", "tollgated", "-descriptors", "account=tools")
	if !strings.Contains(out, "overall_code:OK") {
		t.Fatalf("client_cmd for a funded account: %s", out)
	}
	out = runTool(t, client, "-dial_string", addr, "-domain", "tollgated", "-descriptors", "account=nobody")
	if !strings.Contains(out, "overall_code:OVER_LIMIT") || !strings.Contains(out, "unknown-account") {
		t.Fatalf("client_cmd for an unknown account: %s", out)
	}
}
