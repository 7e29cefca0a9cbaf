package grpcapi

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/handover"
	"github.com/tollgated/tollgated/internal/handovertest"
)

// countingBinder binds keys for every account but "ghost", as a plane
// that never installed it.
type countingBinder struct{ binds atomic.Int32 }

func (b *countingBinder) BindInstalledKey(_ credential.Digest, id core.AccountID) error {
	if id == "ghost" {
		return plane.ErrUnknownAccount
	}
	b.binds.Add(1)
	return nil
}

// serve runs a Server in front of dataPlane and returns a client of it.
// The data plane is one shard's hand-over port, served by a goroutine
// that runs dataPlane over each call's request, one call at a time, as a
// shard's thread does.
func serve(t *testing.T, dataPlane http.Handler, handOver int, ready func() bool) (*grpc.ClientConn, *countingBinder) {
	t.Helper()
	return serveCounted(t, dataPlane, handOver, ready, new(Stats))
}

// serveCounted is serve with the hand-over's counters in stats.
func serveCounted(t *testing.T, dataPlane http.Handler, handOver int, ready func() bool, stats *Stats) (*grpc.ClientConn, *countingBinder) {
	t.Helper()
	b := new(countingBinder)
	s, err := Listen(Config{Listen: "127.0.0.1:0", Ports: []*handover.Port{servePort(t, dataPlane, handOver)}, Domain: "tollgated",
		AccountEntry: "account", KeyHeader: "Authorization", Secret: make([]byte, 32), Binder: b, Ready: ready,
		MaxHandOver: handOver, MaxConns: 8, MaxStreams: 8, MaxHeaderBytes: testMaxHeaderBytes, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Stop(time.Now()) })
	c, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, b
}

// servePort is a hand-over port whose calls h answers on one goroutine.
func servePort(t *testing.T, h http.Handler, size int) *handover.Port {
	handle := fasthttpadaptor.NewFastHTTPHandler(h)
	return handovertest.Serve(t, size, func(c *handover.Call) {
		var ctx fasthttp.RequestCtx
		ctx.Init(&c.Req, nil, nil)
		handle(&ctx)
		ctx.Response.CopyTo(&c.Resp)
	})
}

func always() bool { return true }

func someCheck(path string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: path, Headers: map[string]string{"authorization": "Bearer k"}}}}}
}

// TestAFullHandOverIsRefusedNotQueued: with every hand-over slot busy, a
// call is answered RESOURCE_EXHAUSTED at once instead of waiting.
func TestAFullHandOverIsRefusedNotQueued(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stats := new(Stats)
	conn, _ := serveCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(entered) })
		<-release
		w.WriteHeader(200)
	}), 1, always, stats)
	authz := authv3.NewAuthorizationClient(conn)
	first := make(chan error, 1)
	go func() {
		_, err := authz.Check(context.Background(), someCheck("/a"))
		first <- err
	}()
	<-entered
	_, err := authz.Check(context.Background(), someCheck("/b"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call while the only hand-over slot is busy: %v, want RESOURCE_EXHAUSTED", err)
	}
	if stats.Busy.Load() != 1 || stats.InFlight.Load() != 1 {
		t.Fatalf("counted %d refused busy with %d in flight, want 1 and 1", stats.Busy.Load(), stats.InFlight.Load())
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	if stats.InFlight.Load() != 0 {
		t.Fatalf("%d in flight after every call returned", stats.InFlight.Load())
	}
}

// TestAnAccountKeyIsBoundOnceAndAwaited: the first call for an account
// binds its key and waits out shards that have not applied it (401); an
// account the plane does not hold is OVER_LIMIT unknown-account without
// any binding or hand-over.
func TestAnAccountKeyIsBoundOnceAndAwaited(t *testing.T) {
	var calls atomic.Int32
	known := map[string]bool{}
	var mu sync.Mutex
	conn, b := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		mu.Lock()
		ok := known[r.Header.Get("Authorization")]
		mu.Unlock()
		if n <= 2 || !ok { // the first two: not applied yet
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(401)
			w.Write([]byte(`{"code":"unknown-principal"}`))
			return
		}
		w.Header().Set("X-Tollgate-Units", "3")
		w.WriteHeader(200)
	}), 4, always)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(account string) *rlsv3.RateLimitResponse {
		r, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "tollgated",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: account}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Whatever key the server derives for "acme" is what the data plane
	// learns to know.
	keys, _ := newAccountKeys(make([]byte, 32), new(countingBinder))
	k, _, _ := keys.keyFor("acme")
	mu.Lock()
	known["Bearer "+k] = true
	mu.Unlock()

	if r := ask("acme"); r.OverallCode != rlsv3.RateLimitResponse_OK || calls.Load() != 3 || b.binds.Load() != 1 {
		t.Fatalf("first call: %v after %d calls and %d binds, want OK after 3 calls and 1 bind", r, calls.Load(), b.binds.Load())
	}
	if r := ask("acme"); r.OverallCode != rlsv3.RateLimitResponse_OK || b.binds.Load() != 1 || calls.Load() != 4 {
		t.Fatalf("second call: %v, %d binds, %d calls", r, b.binds.Load(), calls.Load())
	}
	r := ask("ghost")
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.ResponseHeadersToAdd[0].Value != "unknown-account" || calls.Load() != 4 {
		t.Fatalf("unknown account: %v after %d calls", r, calls.Load())
	}
}

// TestAnOversizedMessageIsRefused: a message above MaxMessageBytes is
// refused by gRPC before any handler runs.
func TestAnOversizedMessageIsRefused(t *testing.T) {
	var calls atomic.Int32
	conn, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }), 1, always)
	req := someCheck("/")
	req.Attributes.Request.Http.Headers["x-big"] = strings.Repeat("a", MaxMessageBytes)
	_, err := authv3.NewAuthorizationClient(conn).Check(context.Background(), req)
	if status.Code(err) != codes.ResourceExhausted || calls.Load() != 0 {
		t.Fatalf("%v after %d hand-overs, want RESOURCE_EXHAUSTED and none", err, calls.Load())
	}
}

// TestHealthIsReadiness: the health service answers what ready says, per
// service, and NOT_FOUND for a service it does not serve.
func TestHealthIsReadiness(t *testing.T) {
	var ready atomic.Bool
	conn, _ := serve(t, http.NotFoundHandler(), 1, ready.Load)
	h := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for _, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "envoy.service.auth.v3.Authorization"} {
			r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.Status != want {
				t.Fatalf("%q: %v %v, want %v", svc, r, err, want)
			}
		}
		ready.Store(true)
	}
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
}

// TestRateStatusReadsTheAnswer: the bucket's numbers come from the
// answer's RateLimit fields; a refusal names its code and carries
// Retry-After; a problem with the original request is INVALID_ARGUMENT.
func TestRateStatusReadsTheAnswer(t *testing.T) {
	var resp fasthttp.Response
	resp.Header.Set("RateLimit-Policy", `"requests";q=5;w=1;tollgated-burst=10, "concurrency";q=3;qu="concurrent-requests"`)
	resp.Header.Set("RateLimit", `"requests";r=4;t=2`)
	resp.Header.Set("X-Tollgate-Request-Id", "abc")
	st, hdrs, err := rateStatus(&resp)
	if err != nil || st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 5 ||
		st.LimitRemaining != 4 || st.DurationUntilReset.AsDuration() != 2*time.Second || len(hdrs) != 1 {
		t.Fatalf("allowed: %v %v %v", st, hdrs, err)
	}
	resp.SetStatusCode(429)
	resp.Header.Set("Retry-After", "1")
	resp.SetBody([]byte(`{"code":"request-rate-limited","status":429}`))
	st, hdrs, err = rateStatus(&resp)
	if err != nil || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || hdrs[0].Value != "request-rate-limited" || headerValue(hdrs, "Retry-After") != "1" {
		t.Fatalf("refused: %v %v %v", st, hdrs, err)
	}
	resp.SetStatusCode(400)
	resp.SetBody([]byte(`{"code":"invalid-original-uri"}`))
	if _, _, err := rateStatus(&resp); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "invalid-original-uri") {
		t.Fatalf("bad path: %v", err)
	}
}

func headerValue[H interface {
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

// TestAddressesDefaultToLoopback: a listen address without a host is
// loopback.
func TestAddressesDefaultToLoopback(t *testing.T) {
	if a, err := defaultLoopback(":8081"); err != nil || a != "127.0.0.1:8081" {
		t.Fatalf(":8081 listens on %q %v", a, err)
	}
	if a, _ := defaultLoopback("0.0.0.0:8081"); a != "0.0.0.0:8081" {
		t.Fatalf("an explicit host changed: %q", a)
	}
}

// TestHeaderValuesAreReadAsAnHTTPParserReadsThem: a check's header values
// reach the shard without the spaces and tabs around them, as the fields
// of a request read from a socket do, so " Bearer k" is the key k and a
// count header "\t7" is 7.
func TestHeaderValuesAreReadAsAnHTTPParserReadsThem(t *testing.T) {
	req := someCheck("/")
	req.Attributes.Request.Http.Headers = map[string]string{"authorization": " Bearer k\t", "x-count": "\t7 "}
	call, err := decodeCheck(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := call.headerValue("Authorization"); got != "Bearer k" {
		t.Fatalf("authorization %q", got)
	}
	if got := call.headerValue("X-Count"); got != "7" {
		t.Fatalf("x-count %q", got)
	}
}

// TestACheckWithAHeadOverTheBoundIsDenied431: a check whose request line
// and headers, as an HTTP/1.1 head, are over MaxHeaderBytes (here the
// default, the data plane's 8 KiB) is denied 431 header-too-large, as the
// shards answer such a forward-auth request, and reaches no shard; one
// just within the bound is decided.
func TestACheckWithAHeadOverTheBoundIsDenied431(t *testing.T) {
	var calls atomic.Int32
	conn, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }), 1, always)
	client := authv3.NewAuthorizationClient(conn)
	// The head a gateway would send: the request line, Envoy's
	// :authority as Host, the key and a large field, written out here
	// rather than computed by the code under test.
	head := func(big string) string {
		return "GET / HTTP/1.1\r\nhost: shop.example\r\nauthorization: Bearer k\r\nx-big: " + big + "\r\n\r\n"
	}
	fill := testMaxHeaderBytes - len(head(""))
	req := someCheck("/")
	h := req.Attributes.Request.Http
	h.Headers[":method"], h.Headers[":path"], h.Headers[":scheme"], h.Headers[":authority"] = "GET", "/", "http", "shop.example"
	h.Headers["x-big"] = strings.Repeat("a", fill)
	// head writes out exactly these fields; a change to someCheck must
	// change it too.
	if want := []string{":authority", ":method", ":path", ":scheme", "authorization", "x-big"}; !slices.Equal(slices.Sorted(maps.Keys(h.Headers)), want) || h.Method != "GET" || h.Path != "/" {
		t.Fatalf("the check carries %v, %s %s; head writes %v, GET /", slices.Sorted(maps.Keys(h.Headers)), h.Method, h.Path, want)
	}
	resp, err := client.Check(context.Background(), req)
	if err != nil || resp.GetOkResponse() == nil || calls.Load() != 1 {
		t.Fatalf("a head of exactly the bound: %v %v after %d decisions, want OK from the data plane", resp, err, calls.Load())
	}
	h.Headers["x-big"] += "a"
	resp, err = client.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	d := resp.GetDeniedResponse()
	if d.GetStatus().GetCode() != 431 || resp.GetStatus().GetMessage() != "header-too-large" ||
		d.GetBody() != tooLargeBody || calls.Load() != 1 {
		t.Fatalf("a head one byte over the bound: %v after %d decisions, want 431 header-too-large and no decision", resp, calls.Load())
	}
}
