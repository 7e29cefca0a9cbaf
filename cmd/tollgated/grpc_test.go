package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgated/tollgated/internal/await"
)

// grpcConn dials the gRPC listener the ready line of p names.
func grpcConn(t *testing.T, p *proc) *grpc.ClientConn {
	t.Helper()
	var addr string
	for line := range strings.SplitSeq(p.all.String(), "\n") {
		if strings.Contains(line, "tollgated ready") {
			var m struct{ GRPC string }
			json.Unmarshal([]byte(line), &m)
			addr = m.GRPC
		}
	}
	if addr == "" {
		t.Fatalf("no gRPC address in the ready line:\n%s", p.all.String())
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gatewayPolicy prices every forward-auth route at one request of price
// units, counting POST /v1/chat by the Hits-Addend header the rate-limit
// service sets, and refusing /admin/**.
func (p *proc) gatewayPolicy(id string, price uint64, rate, burst int) {
	p.t.Helper()
	p.adminCall("PUT", "/v1/accounts/"+id+"/policy", map[string]any{
		"permissions": []string{"chat"},
		"operations":  map[string]any{"requests": map[string]any{"weight": price}},
		"limits": map[string]any{"max_items": 1000, "hold_timeout_ms": 30000,
			"request_rate": rate, "request_burst": burst},
		"routes": map[string]any{
			"rules": []map[string]any{
				{"method": "POST", "path": "/v1/chat", "op": "requests", "count": 1, "count_header": "hits-addend"},
				{"method": "*", "path": "/admin/**", "deny": true},
			},
			"default": map[string]any{"op": "requests", "count": 1},
		},
	}, http.StatusOK)
}

func descriptor(entries ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	return d
}

func shouldRateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "tollgated", Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return r
}

func headerOf[H interface {
	GetKey() string
	GetValue() string
}](hs []H, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h.GetKey(), name) {
			return h.GetValue()
		}
	}
	return ""
}

// TestGRPCRateLimitServiceAdmitsWithinTheBurstThenRefuses: Envoy's
// rate-limit service over gRPC, on the real binary: an account's request
// burst is answered OK with the bucket's numbers, then OVER_LIMIT with the
// refusal's code; an account without money and an unknown account are
// OVER_LIMIT; hits_addend is the count a route reads; bad input is
// INVALID_ARGUMENT.
func TestGRPCRateLimitServiceAdmitsWithinTheBurstThenRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	p := startProc(t, t.TempDir(), "--shards", "1", "--grpc-listen", "127.0.0.1:0")
	p.provision("edge", 100_000, 10)
	p.gatewayPolicy("edge", 10, 1, 3)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "broke"}, http.StatusCreated)
	p.gatewayPolicy("broke", 10, 0, 0)
	rls := rlsv3.NewRateLimitServiceClient(grpcConn(t, p))

	// The burst of three passes, each with what is left of it; the
	// bucket refills one a second, so within the next few calls one is
	// refused (however slow this machine is, it cannot refill faster).
	start := time.Now()
	var ok int
	var refused *rlsv3.RateLimitResponse
	for i := 0; i < 20 && refused == nil; i++ {
		r := shouldRateLimit(t, rls, 0, descriptor("account", "edge"))
		st := r.Statuses[0]
		if r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused = r
			break
		}
		ok++
		if st.CurrentLimit.GetRequestsPerUnit() != 1 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("current_limit %v, want 1 per second", st.CurrentLimit)
		}
		if ok <= 3 && st.LimitRemaining != uint32(3-ok) {
			t.Fatalf("call %d: limit_remaining %d, want %d", ok, st.LimitRemaining, 3-ok)
		}
		if headerOf(r.RequestHeadersToAdd, "X-Tollgate-Units") != "10" || headerOf(r.RequestHeadersToAdd, "X-Tollgate-Account") != "edge" {
			t.Fatalf("request headers %v: want the account and 10 units billed", r.RequestHeadersToAdd)
		}
	}
	if refused == nil || ok < 3 || ok > 3+int(time.Since(start)/time.Second)+1 {
		t.Fatalf("%d OK before a refusal (refused: %v) in %v: want the burst of 3, then OVER_LIMIT", ok, refused != nil, time.Since(start))
	}
	if got := headerOf(refused.ResponseHeadersToAdd, "X-Tollgate-Reason"); got != "request-rate-limited" {
		t.Fatalf("refusal reason %q (%v)", got, refused.ResponseHeadersToAdd)
	}
	if headerOf(refused.ResponseHeadersToAdd, "Retry-After") == "" || refused.Statuses[0].DurationUntilReset == nil {
		t.Fatalf("refusal without Retry-After or duration_until_reset: %v", refused)
	}

	r := shouldRateLimit(t, rls, 0, descriptor("account", "broke"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.HasPrefix(headerOf(r.ResponseHeadersToAdd, "X-Tollgate-Reason"), "balance-") {
		t.Fatalf("an account without money: %v", r)
	}
	r = shouldRateLimit(t, rls, 0, descriptor("account", "nobody"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headerOf(r.ResponseHeadersToAdd, "X-Tollgate-Reason") != "unknown-account" {
		t.Fatalf("an unknown account: %v", r)
	}
	// A route the policy denies is over the limit, whatever the rate.
	r = shouldRateLimit(t, rls, 0, descriptor("account", "broke", "path", "/admin/users"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headerOf(r.ResponseHeadersToAdd, "X-Tollgate-Reason") != "route-not-allowed" {
		t.Fatalf("a denied route: %v", r)
	}

	ctx := context.Background()
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"another domain":        {Domain: "envoy", Descriptors: []*rlcommon.RateLimitDescriptor{descriptor("account", "edge")}},
		"no descriptor":         {Domain: "tollgated"},
		"no account entry":      {Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{descriptor("path", "/")}},
		"a malformed account":   {Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{descriptor("account", "Edge\r\nX: 1")}},
		"a path with a newline": {Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{descriptor("account", "edge", "path", "/a\nb")}},
	} {
		_, err := rls.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	// The services' series are exported, with nothing held or refused here.
	metrics := p.scrape()
	for _, series := range []string{"tollgated_grpc_held 0", `tollgated_grpc_refused_total{reason="busy"} 0`,
		`tollgated_grpc_refused_total{reason="no_answer"} 0`, "tollgated_grpc_abandoned_total 0"} {
		if !strings.Contains(metrics, "\n"+series+"\n") {
			t.Errorf("metrics lack %q", series)
		}
	}
	p.requireAlive(t)
}

// TestGRPCDescriptorsOfOneCallAreDecidedInTurn: on the real binary, a
// ShouldRateLimit call of several descriptors, each decision acknowledged
// once its usage is durable, is decided descriptor after descriptor: a
// durable mark completes one decision in the shard's pass, and the next
// descriptor is asked for after that pass, never from inside it (the shard
// panics if it is). Every descriptor is billed once.
func TestGRPCDescriptorsOfOneCallAreDecidedInTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	p := startProc(t, t.TempDir(), "--shards", "1", "--grpc-listen", "127.0.0.1:0")
	for _, id := range []string{"edge", "side"} {
		p.provision(id, 100_000, 10)
		p.gatewayPolicy(id, 10, 0, 0)
	}
	rls := rlsv3.NewRateLimitServiceClient(grpcConn(t, p))
	const calls = 4
	for range calls {
		r := shouldRateLimit(t, rls, 0, descriptor("account", "edge"),
			descriptor("account", "side", "method", "POST", "path", "/v1/chat"), descriptor("account", "edge", "path", "/x"))
		if r.OverallCode != rlsv3.RateLimitResponse_OK || len(r.Statuses) != 3 {
			t.Fatalf("a call of three descriptors: %v", r)
		}
	}
	await.True(t, "every descriptor billed", func() bool {
		return p.funds("edge")["spent"] == 2*calls*10 && p.funds("side")["spent"] == calls*10
	})
	p.requireAlive(t)
}

// TestGRPCCheckDecidesLikeForwardAuth: ext_authz over gRPC answers what
// /v1/authz answers over HTTP for the same original request — allowed
// with the same X-Tollgate-* fields for the upstream, denied with the same
// status, code and headers — and health and reflection answer.
func TestGRPCCheckDecidesLikeForwardAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	p := startProc(t, t.TempDir(), "--grpc-listen", "127.0.0.1:0")
	key := p.provision("shop", 100_000, 7)
	p.gatewayPolicy("shop", 7, 0, 0)
	conn := grpcConn(t, p)
	authz := authv3.NewAuthorizationClient(conn)

	cases := []struct {
		name, method, path, auth string
		status                   int
	}{
		{"allowed", "POST", "/v1/chat?x=1", "Bearer " + key, 200},
		{"default route", "GET", "/v1/other", "Bearer " + key, 200},
		{"denied route", "GET", "/admin/users", "Bearer " + key, 403},
		{"unknown key", "GET", "/v1/other", "Bearer tgk_nope", 401},
		{"no key", "GET", "/v1/other", "", 401},
		{"not origin-form", "GET", "http://elsewhere/v1/chat", "Bearer " + key, 400},
	}
	for _, c := range cases {
		hdrs := map[string]string{"x-request-id": "1"}
		if c.auth != "" {
			hdrs["authorization"] = c.auth
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: c.method, Path: c.path, Headers: hdrs}}}})
		cancel()
		if err != nil {
			t.Fatalf("%s: Check: %v", c.name, err)
		}
		httpStatus, httpBody := forwardAuth(t, p, c.method, c.path, c.auth)
		if httpStatus != c.status {
			t.Fatalf("%s: /v1/authz answered %d %s, want %d", c.name, httpStatus, httpBody, c.status)
		}
		if c.status == 200 {
			ok := got.GetOkResponse()
			if got.Status.GetCode() != int32(codes.OK) || ok == nil {
				t.Fatalf("%s: %v, want allowed", c.name, got)
			}
			if a := headerOfOptions(ok.Headers, "X-Tollgate-Account"); a != "shop" || headerOfOptions(ok.Headers, "X-Tollgate-Units") != "7" ||
				len(headerOfOptions(ok.Headers, "X-Tollgate-Request-Id")) != 32 {
				t.Fatalf("%s: upstream headers %v", c.name, ok.Headers)
			}
			continue
		}
		d := got.GetDeniedResponse()
		if d == nil || int(d.Status.GetCode()) != c.status || got.Status.GetCode() == int32(codes.OK) {
			t.Fatalf("%s: %v, want denied %d", c.name, got, c.status)
		}
		if problemCodeOf(d.Body) != problemCodeOf(string(httpBody)) || headerOfOptions(d.Headers, "Content-Type") != "application/problem+json" {
			t.Fatalf("%s: denied body %s headers %v; /v1/authz answered %s", c.name, d.Body, d.Headers, httpBody)
		}
	}

	ctx := context.Background()
	// A head over --max-header-bytes (the default, 8 KiB) is 431
	// header-too-large on both paths, with the same problem document.
	big := strings.Repeat("a", 9000)
	got, err := authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/v1/chat", Headers: map[string]string{"authorization": "Bearer " + key, "x-big": big}}}}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+p.listen+"/v1/authz", nil)
	req.Header.Set("X-Original-Method", "GET")
	req.Header.Set("X-Original-URI", "/v1/chat")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Big", big)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	httpBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if d := got.GetDeniedResponse(); resp.StatusCode != 431 || d.GetStatus().GetCode() != 431 ||
		problemCodeOf(d.GetBody()) != "header-too-large" || d.GetBody() != string(httpBody) {
		t.Fatalf("a head over the bound: gRPC %v, /v1/authz %d %s; want 431 header-too-large from both", got, resp.StatusCode, httpBody)
	}
	if _, err := authz.Check(ctx, &authv3.CheckRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty CheckRequest: %v, want INVALID_ARGUMENT", err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	stream, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}})
	lr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range lr.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if all := strings.Join(names, " "); !strings.Contains(all, "envoy.service.ratelimit.v3.RateLimitService") || !strings.Contains(all, "envoy.service.auth.v3.Authorization") {
		t.Fatalf("reflection lists %v", names)
	}
}

// forwardAuth asks /v1/authz over HTTP, as nginx does.
func forwardAuth(t *testing.T, p *proc, method, uri, auth string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+p.listen+"/v1/authz", nil)
	req.Header.Set("X-Original-Method", method)
	req.Header.Set("X-Original-URI", uri)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func headerOfOptions(hs []*corev3.HeaderValueOption, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h.GetHeader().GetKey(), name) {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func problemCodeOf(body string) string {
	var p struct{ Code string }
	json.Unmarshal([]byte(body), &p)
	return p.Code
}

// TestGRPCHealthTurnsNotServingFirstAtShutdown: on SIGTERM the gRPC
// services are the first thing to stop serving — a health watcher hears
// NOT_SERVING while the process still runs (its data plane drains after),
// and a watch does not hold the stop until --shutdown-grace.
func TestGRPCHealthTurnsNotServingFirstAtShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	p := startProc(t, t.TempDir(), "--grpc-listen", "127.0.0.1:0", "--shutdown-grace", "20s")
	watch, err := healthpb.NewHealthClient(grpcConn(t, p)).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first status %v %v, want SERVING", r, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r, err := watch.Recv()
	if err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after SIGTERM: %v %v, want NOT_SERVING", r, err)
	}
	select {
	case err := <-p.exited:
		t.Fatalf("the process had exited (%v) before NOT_SERVING arrived", err)
	default:
	}
	p.waitFor("gRPC services not serving", 15*time.Second)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second): // well inside the 20 s grace a held watch would take
		t.Fatal("no exit within 15 s of SIGTERM: the watch held the stop")
	}
	logs := p.all.String()
	if g, u := strings.Index(logs, "gRPC services not serving"), strings.Index(logs, "usage exported"); g < 0 || u < 0 || g > u {
		t.Fatalf("the gRPC services did not stop serving before the node drained:\n%s", logs)
	}
}
