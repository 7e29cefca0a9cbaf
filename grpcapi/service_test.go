package grpcapi

import (
	"context"
	"fmt"
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
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgated/tollgated/internal/await"
)

func descriptor(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func rateLimit(ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "tollgated", Descriptors: ds}
}

func someCheck(path string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: path, Headers: map[string]string{"authorization": "Bearer k"}}}}}
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

// quota answers like a shard's /v1/authz for an account with a bucket of
// burst requests: 200 with the RateLimit fields and X-Tollgate-* fields
// while it lasts, then 429 request-rate-limited with Retry-After.
func quota(burst int) http.Handler {
	var mu sync.Mutex
	left := map[string]int{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Authorization")
		if _, ok := left[key]; !ok {
			left[key] = burst
		}
		w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"requests";q=5;w=1;tollgated-burst=%d`, burst))
		if left[key] == 0 {
			w.Header().Set("RateLimit", `"requests";r=0;t=1`)
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(429)
			w.Write([]byte(`{"type":"about:blank","status":429,"code":"request-rate-limited"}`))
			return
		}
		left[key]--
		w.Header().Set("RateLimit", fmt.Sprintf(`"requests";r=%d;t=2`, left[key]))
		w.Header().Set("X-Tollgate-Units", r.Header.Get("Hits-Addend"))
		w.Header().Set("X-Tollgate-Request-Id", "req-"+r.Header.Get("X-Original-Uri"))
		if r.Header.Get("X-Original-Method") == "POST" {
			w.Header().Set(hdrPostpone, "20ms") // as a durable acknowledgement
		}
	})
}

// TestShouldRateLimitAdmitsWithinTheBurstThenRefuses: each call is a
// forward-auth decision for the descriptor's account; its answer carries
// the bucket's numbers and the X-Tollgate-* fields for the upstream
// request, and once the bucket is empty OVER_LIMIT with the refusal's
// code, Retry-After and RateLimit fields for the client.
func TestShouldRateLimitAdmitsWithinTheBurstThenRefuses(t *testing.T) {
	conn, h := serve(t, quota(2), options{})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	req := rateLimit(descriptor("account", "acme", "path", "/v1/chat", "method", "GET"))
	req.HitsAddend = 3
	for i := range 2 {
		r, err := rls.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || len(r.Statuses) != 1 {
			t.Fatalf("call %d: %v %v", i, r, err)
		}
		st := r.Statuses[0]
		if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND ||
			st.CurrentLimit.GetName() != "requests" || st.LimitRemaining != uint32(1-i) || st.DurationUntilReset.AsDuration() != 2*time.Second {
			t.Fatalf("call %d: status %v", i, st)
		}
		if headerValue(r.RequestHeadersToAdd, "X-Tollgate-Units") != "3" || headerValue(r.RequestHeadersToAdd, "X-Tollgate-Request-Id") != "req-/v1/chat" {
			t.Fatalf("call %d: upstream headers %v", i, r.RequestHeadersToAdd)
		}
	}
	r, err := rls.ShouldRateLimit(ctx, req)
	if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over the burst: %v %v", r, err)
	}
	if headerValue(r.ResponseHeadersToAdd, hdrReason) != "request-rate-limited" || headerValue(r.ResponseHeadersToAdd, "Retry-After") != "1" ||
		headerValue(r.ResponseHeadersToAdd, "RateLimit") != `"requests";r=0;t=1` || len(r.RequestHeadersToAdd) != 0 {
		t.Fatalf("over the burst: headers %v / %v", r.ResponseHeadersToAdd, r.RequestHeadersToAdd)
	}
	if n := h.decisions.Load(); n != 3 {
		t.Fatalf("%d decisions, want 3", n)
	}
}

// TestDescriptorsAreDecidedInOrderAndTheFirstRefusalSpeaks: a request of
// several descriptors is one decision each, in order, over several
// accounts; the answer is OVER_LIMIT if any is, with the first refusal's
// headers, and the OK descriptors' upstream headers.
func TestDescriptorsAreDecidedInOrderAndTheFirstRefusalSpeaks(t *testing.T) {
	conn, h := serve(t, quota(1), options{})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	// Drain b's bucket first.
	if r, err := rls.ShouldRateLimit(ctx, rateLimit(descriptor("account", "b"))); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatal(r, err)
	}
	r, err := rls.ShouldRateLimit(ctx, rateLimit(descriptor("account", "a", "path", "/a"), descriptor("account", "b"),
		descriptor("account", "ghost"), descriptor("account", "c", "path", "/c", "method", "POST")))
	if err != nil {
		t.Fatal(err)
	}
	codes := []rlsv3.RateLimitResponse_Code{}
	for _, st := range r.Statuses {
		codes = append(codes, st.Code)
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT,
		rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK}
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || !slices.Equal(codes, want) {
		t.Fatalf("statuses %v overall %v, want %v OVER_LIMIT", codes, r.OverallCode, want)
	}
	if headerValue(r.ResponseHeadersToAdd, hdrReason) != "request-rate-limited" {
		t.Fatalf("the first refusal's reason: %v", r.ResponseHeadersToAdd)
	}
	var ids []string
	for _, hv := range r.RequestHeadersToAdd {
		if hv.Key == "X-Tollgate-Request-Id" {
			ids = append(ids, hv.Value)
		}
	}
	if !slices.Equal(ids, []string{"req-/a", "req-/c"}) {
		t.Fatalf("upstream request ids %v", ids)
	}
	if n := h.decisions.Load(); n != 4 { // b, then a, b, c: ghost reaches no shard
		t.Fatalf("%d decisions, want 4", n)
	}
}

// TestPostponedDecisionsLetTheConnectionsOtherCallsGoOn: calls whose
// answers wait (for the disk) are held per stream, so the connection's
// other calls are decided and answered while they wait, and every held
// call is answered once its decision comes.
func TestPostponedDecisionsLetTheConnectionsOtherCallsGoOn(t *testing.T) {
	conn, h := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Original-Method") == "POST" {
			w.Header().Set(hdrPostpone, "1h") // until released
		}
		w.Header().Set("X-Tollgate-Request-Id", "req-"+r.Header.Get("X-Original-Uri"))
	}), options{})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	call := func(method string, i int) error {
		r, err := rls.ShouldRateLimit(ctx, rateLimit(descriptor("account", fmt.Sprintf("a%d", i%4), "method", method, "path", fmt.Sprintf("/%d", i))))
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || headerValue(r.RequestHeadersToAdd, "X-Tollgate-Request-Id") != fmt.Sprintf("req-/%d", i) {
			return fmt.Errorf("%s %d: %v %v", method, i, r, err)
		}
		return nil
	}
	held := make(chan error, 24)
	for i := range 24 {
		go func() { held <- call("POST", i) }()
	}
	await.True(t, "24 calls held", func() bool { return h.stats.Held.Load() == 24 })
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for i := range 24 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- call("GET", 100+i) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := h.stats.Held.Load(); n != 24 {
		t.Fatalf("%d calls held once the others were answered, want 24", n)
	}
	h.release.Store(true)
	for range 24 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	if n := h.stats.Held.Load(); n != 0 {
		t.Fatalf("%d calls still counted held", n)
	}
}

// TestAFullShardRefusesNotQueues: with MaxHeld calls held, one more is
// refused RESOURCE_EXHAUSTED at once, undecided; once they are answered,
// calls are decided again.
func TestAFullShardRefusesNotQueues(t *testing.T) {
	conn, h := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Original-Uri") == "/slow" {
			w.Header().Set(hdrPostpone, "1h") // until released
		}
	}), options{cfg: func(c *Config) { c.MaxHeld = 1 }})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := rls.ShouldRateLimit(ctx, rateLimit(descriptor("account", "a", "path", "/slow")))
		done <- err
	}()
	await.True(t, "a call held", func() bool { return h.stats.Held.Load() == 1 })
	_, err := rls.ShouldRateLimit(ctx, rateLimit(descriptor("account", "a")))
	if status.Code(err) != codes.ResourceExhausted || h.stats.Busy.Load() != 1 || h.stats.Held.Load() != 1 {
		t.Fatalf("a call beyond the held ones: %v, busy %d, held %d; want RESOURCE_EXHAUSTED while the other is held", err, h.stats.Busy.Load(), h.stats.Held.Load())
	}
	h.release.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := rls.ShouldRateLimit(ctx, rateLimit(descriptor("account", "a"))); err != nil {
		t.Fatal(err)
	}
	if n := h.decisions.Load(); n != 2 {
		t.Fatalf("%d decisions, want 2 (the refused call decided nothing)", n)
	}
}

// TestAnAnswerThatNeverComesTimesOut: a held call whose decision the shard
// never completes is answered after AnswerTimeout as a postponed request
// the loop gives up on: OVER_LIMIT answer-timeout for a descriptor, a 504
// denial for a check.
func TestAnAnswerThatNeverComesTimesOut(t *testing.T) {
	conn, h := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(hdrPostpone, "1h")
	}), options{cfg: func(c *Config) { c.AnswerTimeout = int64(150 * time.Millisecond) }})
	ctx := context.Background()
	r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rateLimit(descriptor("account", "a")))
	if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headerValue(r.ResponseHeadersToAdd, hdrReason) != "answer-timeout" {
		t.Fatalf("descriptor: %v %v", r, err)
	}
	c, err := authv3.NewAuthorizationClient(conn).Check(ctx, someCheck("/"))
	if err != nil || c.GetDeniedResponse().GetStatus().GetCode() != 504 {
		t.Fatalf("check: %v %v", c, err)
	}
	if h.stats.NoAnswer.Load() != 2 || h.stats.Held.Load() != 0 {
		t.Fatalf("no_answer %d, held %d", h.stats.NoAnswer.Load(), h.stats.Held.Load())
	}
}

// TestACallWhoseClientLeftIsDropped: a held call whose client resets its
// stream (a gateway's timeout) is dropped long before the answer timeout.
// The shard hears at once that its decision is no longer pending (so a
// funding waiter is never billed), the call's next descriptor is never
// decided, and a call waiting for its account's key decides nothing.
func TestACallWhoseClientLeftIsDropped(t *testing.T) {
	b := &countingBinder{gate: make(chan struct{}), gated: "unbound"}
	t.Cleanup(func() { close(b.gate) })
	conn, h := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(hdrPostpone, "1h")
	}), options{binder: b, cfg: func(c *Config) { c.AnswerTimeout = int64(time.Minute) }})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	leave := func(d ...*rlcommon.RateLimitDescriptor) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if r, err := rls.ShouldRateLimit(ctx, rateLimit(d...)); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("a call held past its deadline: %v %v", r, err)
		}
	}
	leave(descriptor("account", "a"), descriptor("account", "b"))
	await.True(t, "the postponed decision is dropped", func() bool { return h.dropped.Load() == 1 })
	leave(descriptor("account", "unbound"))
	await.True(t, "both calls are abandoned", func() bool { return h.stats.Abandoned.Load() == 2 })
	if n := h.decisions.Load(); n != 1 {
		t.Fatalf("%d decisions, want 1: the first descriptor's", n)
	}
	if h.stats.Held.Load() != 0 || h.stats.NoAnswer.Load() != 0 {
		t.Fatalf("held %d, no_answer %d", h.stats.Held.Load(), h.stats.NoAnswer.Load())
	}
	// The slots are free: a new call is served.
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestAnAccountKeyIsBoundOnceAndAwaited: the first call for an account
// waits, held, while its key is bound (the loop goes on serving), and
// shards that have not applied the binding yet (401) are asked again;
// later calls bind nothing; an account the plane does not hold is
// OVER_LIMIT unknown-account with no decision.
func TestAnAccountKeyIsBoundOnceAndAwaited(t *testing.T) {
	var calls atomic.Int32
	b := &countingBinder{gate: make(chan struct{})}
	keys, _ := newAccountKeys(make([]byte, 32), b)
	want := "Bearer " + keys.keyOf("acme")
	conn, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 || r.Header.Get("Authorization") != want { // the first two: not applied yet
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(401)
			w.Write([]byte(`{"code":"unknown-principal"}`))
			return
		}
		w.Header().Set("X-Tollgate-Units", "3")
	}), options{binder: b})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	h := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	ask := func(account string) *rlsv3.RateLimitResponse {
		r, err := rls.ShouldRateLimit(ctx, rateLimit(descriptor("account", account)))
		if err != nil {
			t.Error(err)
		}
		return r
	}
	first := make(chan *rlsv3.RateLimitResponse, 1)
	go func() { first <- ask("acme") }()
	// While the binding waits, the loop serves other calls.
	time.Sleep(20 * time.Millisecond)
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-first:
		t.Fatalf("answered before its key was bound: %v", r)
	default:
	}
	close(b.gate)
	if r := <-first; r.GetOverallCode() != rlsv3.RateLimitResponse_OK || calls.Load() != 3 || b.binds.Load() != 1 {
		t.Fatalf("first call: %v after %d decisions and %d binds, want OK after 3 and 1", r, calls.Load(), b.binds.Load())
	}
	if r := ask("acme"); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || b.binds.Load() != 1 || calls.Load() != 4 {
		t.Fatalf("second call: %v, %d binds, %d decisions", r, b.binds.Load(), calls.Load())
	}
	r := ask("ghost")
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || headerValue(r.ResponseHeadersToAdd, hdrReason) != "unknown-account" || calls.Load() != 4 {
		t.Fatalf("unknown account: %v after %d decisions", r, calls.Load())
	}
}

// TestBadRequestsAreInvalidArgument: a request the services cannot read
// is INVALID_ARGUMENT, saying what is wrong, and decides nothing.
func TestBadRequestsAreInvalidArgument(t *testing.T) {
	conn, h := serve(t, quota(10), options{})
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	for name, c := range map[string]struct {
		req  *rlsv3.RateLimitRequest
		says string
	}{
		"another domain":     {&rlsv3.RateLimitRequest{Domain: "x", Descriptors: []*rlcommon.RateLimitDescriptor{descriptor("account", "a")}}, "domain"},
		"no descriptors":     {rateLimit(), "no descriptors"},
		"no account":         {rateLimit(descriptor("path", "/")), "names the account"},
		"a bad account":      {rateLimit(descriptor("account", "A B")), "account id"},
		"two accounts":       {rateLimit(descriptor("account", "a", "account", "b")), "twice"},
		"a relative path":    {rateLimit(descriptor("account", "a", "path", "x")), "path"},
		"a newline path":     {rateLimit(descriptor("account", "a", "path", "/a\nb")), "path"},
		"a bad method":       {rateLimit(descriptor("account", "a", "method", "G T")), "method"},
		"an override":        {rateLimit(&rlcommon.RateLimitDescriptor{Entries: descriptor("account", "a").Entries, Limit: &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}), "override"},
		"negative hits":      {rateLimit(&rlcommon.RateLimitDescriptor{Entries: descriptor("account", "a").Entries, IsNegativeHits: true}), "negative"},
		"a later bad one":    {rateLimit(descriptor("account", "a"), descriptor("account", "b", "path", "x")), "descriptors[1]"},
		"too many hits":      {&rlsv3.RateLimitRequest{Domain: "tollgated", HitsAddend: maxHits + 1, Descriptors: []*rlcommon.RateLimitDescriptor{descriptor("account", "a")}}, "hits_addend"},
		"17 descriptors":     {rateLimit(slices.Repeat([]*rlcommon.RateLimitDescriptor{descriptor("account", "a")}, 17)...), "descriptors"},
		"a huge entry value": {rateLimit(descriptor("account", "a", "x", strings.Repeat("v", maxEntryValue+1))), "values"},
	} {
		_, err := rls.ShouldRateLimit(ctx, c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.says) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT saying %q", name, err, c.says)
		}
	}
	az := authv3.NewAuthorizationClient(conn)
	for name, req := range map[string]*authv3.CheckRequest{
		"no http":           {},
		"a bad method":      {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "G T", Path: "/"}}}},
		"no path":           {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "GET"}}}},
		"a bad header name": {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/", Headers: map[string]string{"a b": "c"}}}}},
		"a CR in a value":   {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/", Headers: map[string]string{"x": "a\rb"}}}}},
	} {
		if _, err := az.Check(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("check, %s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if n := h.decisions.Load(); n != 0 {
		t.Fatalf("%d decisions for requests refused whole", n)
	}
}

// TestCheckDecidesLikeForwardAuth: Check is /v1/authz: the original method,
// URI and headers reach the shard (values trimmed as an HTTP parser trims
// them, the exchange's own dropped); 200 allows with the upstream fields;
// a refusal denies with the shard's status, headers and problem document.
func TestCheckDecidesLikeForwardAuth(t *testing.T) {
	var seen http.Header
	var mu sync.Mutex
	conn, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		if r.Header.Get("X-Original-Uri") == "/denied" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(402)
			w.Write([]byte(`{"type":"about:blank","status":402,"code":"insufficient-funds"}`))
			return
		}
		if r.Header.Get("X-Original-Method") == "POST" {
			w.Header().Set(hdrPostpone, "10ms")
		}
		w.Header().Set("X-Tollgate-Account", "acme")
		w.Header().Set("RateLimit", `"requests";r=1;t=1`)
		w.Header().Set("X-Other", "not carried")
	}), options{})
	az := authv3.NewAuthorizationClient(conn)
	ctx := context.Background()
	req := someCheck("/v1/x?y=1")
	req.Attributes.Request.Http.Method = "POST"
	req.Attributes.Request.Http.Headers = map[string]string{"authorization": " Bearer k\t", "x-count": "\t7 ", "x-original-uri": "/forged", "host": "h"}
	r, err := az.Check(ctx, req)
	if err != nil || r.GetOkResponse() == nil || r.GetStatus().GetCode() != 0 {
		t.Fatalf("allowed: %v %v", r, err)
	}
	if headerValue(optionHeaders(r.GetOkResponse().GetHeaders()), "X-Tollgate-Account") != "acme" || len(r.GetOkResponse().GetHeaders()) != 2 {
		t.Fatalf("allowed: upstream headers %v", r.GetOkResponse().GetHeaders())
	}
	mu.Lock()
	if seen.Get("Authorization") != "Bearer k" || seen.Get("X-Count") != "7" || seen.Get("X-Original-Uri") != "/v1/x?y=1" ||
		seen.Get("X-Original-Method") != "POST" || len(seen.Values("X-Original-Uri")) != 1 {
		t.Fatalf("the shard saw %v", seen)
	}
	mu.Unlock()
	r, err = az.Check(ctx, someCheck("/denied"))
	d := r.GetDeniedResponse()
	if err != nil || d.GetStatus().GetCode() != 402 || r.GetStatus().GetCode() != int32(codes.PermissionDenied) ||
		r.GetStatus().GetMessage() != "insufficient-funds" || !strings.Contains(d.GetBody(), "insufficient-funds") ||
		headerValue(optionHeaders(d.GetHeaders()), "Retry-After") != "3" {
		t.Fatalf("denied: %v %v", r, err)
	}
}

// optionHeaders is the headers of Envoy's header options.
func optionHeaders[O interface {
	GetHeader() H
}, H interface {
	GetKey() string
	GetValue() string
}](os []O) []H {
	out := make([]H, len(os))
	for i, o := range os {
		out[i] = o.GetHeader()
	}
	return out
}

// TestACheckWithAHeadOverTheBoundIsDenied431: a check whose request line
// and headers, as an HTTP/1.1 head, are over MaxHeaderBytes is denied 431
// header-too-large, as the shards answer such a forward-auth request, and
// reaches no shard; one just within the bound is decided.
func TestACheckWithAHeadOverTheBoundIsDenied431(t *testing.T) {
	conn, h := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), options{})
	client := authv3.NewAuthorizationClient(conn)
	// The head a gateway would send: the request line, Envoy's
	// :authority as Host, the key and a large field, written out here
	// rather than computed by the code under test.
	head := func(big string) string {
		return "GET / HTTP/1.1\r\nhost: shop.example\r\nauthorization: Bearer k\r\nx-big: " + big + "\r\n\r\n"
	}
	fill := testMaxHeaderBytes - len(head(""))
	req := someCheck("/")
	hr := req.Attributes.Request.Http
	hr.Headers[":method"], hr.Headers[":path"], hr.Headers[":scheme"], hr.Headers[":authority"] = "GET", "/", "http", "shop.example"
	hr.Headers["x-big"] = strings.Repeat("a", fill)
	if want := []string{":authority", ":method", ":path", ":scheme", "authorization", "x-big"}; !slices.Equal(slices.Sorted(maps.Keys(hr.Headers)), want) {
		t.Fatalf("the check carries %v; head writes %v", slices.Sorted(maps.Keys(hr.Headers)), want)
	}
	resp, err := client.Check(context.Background(), req)
	if err != nil || resp.GetOkResponse() == nil || h.decisions.Load() != 1 {
		t.Fatalf("a head of exactly the bound: %v %v after %d decisions", resp, err, h.decisions.Load())
	}
	hr.Headers["x-big"] += "a"
	resp, err = client.Check(context.Background(), req)
	d := resp.GetDeniedResponse()
	if err != nil || d.GetStatus().GetCode() != 431 || resp.GetStatus().GetMessage() != "header-too-large" ||
		d.GetBody() != tooLargeBody || h.decisions.Load() != 1 {
		t.Fatalf("a head one byte over the bound: %v %v after %d decisions", resp, err, h.decisions.Load())
	}
}

// TestAnOversizedMessageIsRefused: a message above MaxMessageBytes is
// refused RESOURCE_EXHAUSTED before any decision.
func TestAnOversizedMessageIsRefused(t *testing.T) {
	conn, h := serve(t, quota(10), options{})
	req := someCheck("/")
	req.Attributes.Request.Http.Headers["x-big"] = strings.Repeat("a", MaxMessageBytes)
	_, err := authv3.NewAuthorizationClient(conn).Check(context.Background(), req)
	if status.Code(err) != codes.ResourceExhausted || h.decisions.Load() != 0 {
		t.Fatalf("%v after %d decisions, want RESOURCE_EXHAUSTED and none", err, h.decisions.Load())
	}
}

// TestHealthIsReadiness: Check answers what ready says, per service, and
// NOT_FOUND for a service not served; a Watch gets the status, each
// change, and NOT_SERVING and its end when the loop drains. An open Watch
// lets the loop sleep its idle tick.
func TestHealthIsReadiness(t *testing.T) {
	var ready atomic.Bool
	conn, h := serve(t, quota(1), options{ready: ready.Load})
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for _, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "envoy.service.auth.v3.Authorization"} {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.Status != want {
				t.Fatalf("%q: %v %v, want %v", svc, r, err, want)
			}
		}
		ready.Store(true)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		r, err := w.Recv()
		if err != nil || r.Status != want {
			t.Fatalf("watch: %v %v, want %v", r, err, want)
		}
	}
	next(healthpb.HealthCheckResponse_SERVING)
	h.quiet.Store(false)
	await.True(t, "the loop is quiet with a watch open", h.quiet.Load)
	ready.Store(false)
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	ready.Store(true)
	next(healthpb.HealthCheckResponse_SERVING)
	h.loop.Drain(time.Now().Add(5 * time.Second))
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	if r, err := w.Recv(); err == nil {
		t.Fatalf("the watch goes on after the drain: %v", r)
	}
}

// TestReflectionListsTheServices: server reflection names every service
// and gives the files that describe them.
func TestReflectionListsTheServices(t *testing.T) {
	conn, _ := serve(t, quota(1), options{})
	st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	want := []string{"envoy.service.auth.v3.Authorization", "envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}
	if !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "envoy.service.ratelimit.v3.RateLimitService"}}); err != nil {
		t.Fatal(err)
	}
	r, err = st.Recv()
	if err != nil || len(r.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file containing the service: %v %v", r, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("the stream goes on after the client ended it")
	}
}

// TestAnUnknownMethodIsUnimplemented: a path the services do not serve.
func TestAnUnknownMethodIsUnimplemented(t *testing.T) {
	conn, _ := serve(t, quota(1), options{})
	err := conn.Invoke(context.Background(), "/nope.Service/Nothing", &healthpb.HealthCheckRequest{}, new(healthpb.HealthCheckResponse))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("%v, want UNIMPLEMENTED", err)
	}
}

// TestAKeyThatIsNeverBoundTimesOut: a descriptor whose account's key the
// plane never binds is answered UNAVAILABLE, undecided, after the answer
// timeout; the shard's other calls go on meanwhile.
func TestAKeyThatIsNeverBoundTimesOut(t *testing.T) {
	b := &countingBinder{gate: make(chan struct{})}
	t.Cleanup(func() { close(b.gate) })
	conn, h := serve(t, quota(10), options{binder: b, cfg: func(c *Config) { c.AnswerTimeout = int64(150 * time.Millisecond) }})
	_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), rateLimit(descriptor("account", "stuck")))
	if status.Code(err) != codes.Unavailable || h.decisions.Load() != 0 || h.stats.NoAnswer.Load() != 1 {
		t.Fatalf("%v after %d decisions, no_answer %d; want UNAVAILABLE, none, 1", err, h.decisions.Load(), h.stats.NoAnswer.Load())
	}
}
