package grpcapi

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The decoders turn a gateway's message into a forward-auth call. Their
// fuzz targets take the message's wire bytes (what arrives), and check
// that a call is either refused INVALID_ARGUMENT or is one the shard can
// be sent unchanged: no byte that would end a header early, a method that
// is a token, a URI that starts with "/", a valid account. `make test`
// replays the seeds below and the corpus under testdata/fuzz.

var testRules = rateLimitRules{domain: "tollgated", accountEntry: "account"}

func rateLimitSeeds() []*rlsv3.RateLimitRequest {
	d := func(kv ...string) *rlcommon.RateLimitDescriptor {
		out := &rlcommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	hits := d("account", "acme")
	hits.HitsAddend = wrapperspb.UInt64(7)
	neg := d("account", "acme")
	neg.IsNegativeHits = true
	return []*rlsv3.RateLimitRequest{
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{d("account", "acme")}},
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{d("account", "acme", "method", "POST", "path", "/v1/chat?x=1")}, HitsAddend: 3},
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{hits, neg}},
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{d("generic_key", "x", "account", "a.b-c_d")}},
		{Domain: "other", Descriptors: []*rlcommon.RateLimitDescriptor{d("account", "acme")}},
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{d("account", "acme", "account", "acme")}},
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{d("account", "acme", "path", "/a\r\nX-Injected: 1")}},
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{d("account", "ACME")}},
		{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{d("account", "acme", "method", "GE T")}},
		{Domain: "tollgated"},
	}
}

func checkSeeds() []*authv3.CheckRequest {
	http := func(method, path string, headers map[string]string) *authv3.CheckRequest {
		return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: method, Path: path, Headers: headers}}}}
	}
	raw := http("GET", "/", nil)
	raw.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: "x-api-key", RawValue: []byte("tgk_raw")}, {Key: ":authority", Value: "shop"}}}
	return []*authv3.CheckRequest{
		http("POST", "/v1/chat?x=1", map[string]string{"authorization": "Bearer tgk_x", "x-tokens": "12", ":path": "/v1/chat"}),
		http("GET", "/", map[string]string{"x-original-uri": "/elsewhere", "host": "shop"}),
		http("CONNECT", "shop:443", nil),
		http("GET", "/a\nb", nil),
		http("G:T", "/", nil),
		http("GET", "/", map[string]string{"bad name": "1"}),
		http("GET", "/", map[string]string{"x-a": "line\r\nX-Injected: 1"}),
		raw,
		http("GET", "/", map[string]string{"cookie": "a=1; b=2", "content-type": "text/plain", "user-agent": "u", "authorization": "Bearer k"}),
		{},
	}
}

func FuzzDecodeRateLimit(f *testing.F) {
	for _, m := range rateLimitSeeds() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(wire, &req) != nil {
			return // grpc refuses it before any handler runs
		}
		calls, err := decodeRateLimit(&req, testRules)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("refused with %v, want INVALID_ARGUMENT", err)
			}
			return
		}
		if len(calls) != len(req.Descriptors) || len(calls) > maxDescriptors {
			t.Fatalf("%d calls for %d descriptors", len(calls), len(req.Descriptors))
		}
		for _, c := range calls {
			if !validAccount(c.account) {
				t.Fatalf("account %q accepted", c.account)
			}
			sendable(t, &c)
		}
	})
}

func FuzzDecodeCheck(f *testing.F) {
	for _, m := range checkSeeds() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req authv3.CheckRequest
		if proto.Unmarshal(wire, &req) != nil {
			return
		}
		c, err := decodeCheck(&req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("refused with %v, want INVALID_ARGUMENT", err)
			}
			return
		}
		if c.account != "" {
			t.Fatal("an ext_authz check acts for an account")
		}
		sendable(t, &c)
		for _, h := range c.headers {
			if droppedHeaders[strings.ToLower(h.name)] || strings.HasPrefix(h.name, ":") {
				t.Fatalf("header %q passed on", h.name)
			}
		}
	})
}

// sendable asserts c reaches the shard as decoded: written as an HTTP
// request and parsed back, it has exactly its method, URI and headers.
func sendable(t *testing.T, c *forwardCall) {
	t.Helper()
	if !isToken(c.method) || c.uri == "" || len(c.uri) > maxEntryValue {
		t.Fatalf("method %q, uri %q accepted", c.method, c.uri)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	c.request(req)
	req.SetHost("127.0.0.1")
	wire := req.String()
	var back fasthttp.Request
	if err := back.Read(bufioReader(wire)); err != nil {
		t.Fatalf("%q does not parse back: %v", wire, err)
	}
	if got := string(back.Header.Peek(hdrOriginalMeth)); got != c.method {
		t.Fatalf("method %q arrives as %q", c.method, got)
	}
	if got := string(back.Header.Peek(hdrOriginalURI)); got != c.uri {
		t.Fatalf("uri %q arrives as %q", c.uri, got)
	}
	// Nothing arrives that was not sent: a value cannot smuggle a header
	// of its own (fasthttp may merge repeated ones, which is harmless).
	sent := map[string]bool{"host": true, "x-original-method": true, "x-original-uri": true}
	for _, h := range c.headers {
		sent[strings.ToLower(h.name)] = true
	}
	for k := range back.Header.All() {
		if !sent[strings.ToLower(string(k))] {
			t.Fatalf("header %q arrives, never sent: %q", k, wire)
		}
	}
	// And every value arrives as it was decoded (but for the headers
	// fasthttp keeps one of, which no route reads).
	for _, h := range c.headers {
		if merged[strings.ToLower(h.name)] {
			continue
		}
		found := false
		for _, v := range back.Header.PeekAll(h.name) {
			found = found || string(v) == strings.TrimSpace(h.value)
		}
		if !found {
			t.Fatalf("header %s: %q arrives as %q", h.name, h.value, back.Header.PeekAll(h.name))
		}
	}
}

var merged = map[string]bool{"cookie": true, "user-agent": true, "content-type": true}
