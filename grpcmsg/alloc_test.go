package grpcmsg

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// envoyHeaders are the 12 headers of a typical request as Envoy's
// ext_authz filter sends them.
var envoyHeaders = [][2]string{
	{":authority", "api.example.com"}, {":method", "POST"}, {":path", "/v1/chat/completions"}, {":scheme", "https"},
	{"accept", "application/json"}, {"authorization", "Bearer sk-live-0123456789abcdef"}, {"content-type", "application/json"},
	{"user-agent", "python-httpx/0.27.0"}, {"x-forwarded-proto", "https"}, {"x-request-id", "6f1c1a7e-27a8-4c3e-9b1d-54e4f2a1b9c0"},
	{"x-tollgate-key", "tg_live_8d7f6e5d4c3b2a19"}, {"x-envoy-expected-rq-timeout-ms", "15000"},
}

// envoyCheckRequest is a CheckRequest as Envoy sends it, its headers in the
// headers map or, with headerMap, in header_map (encode_raw_headers).
func envoyCheckRequest(headerMap bool) *authv3.CheckRequest {
	peer := func(ip string, port uint32) *authv3.AttributeContext_Peer {
		return &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}
	}
	h := &authv3.AttributeContext_HttpRequest{Id: "13467891234567890123", Method: "POST", Path: "/v1/chat/completions",
		Host: "api.example.com", Scheme: "https", Protocol: "HTTP/2", Size: 512}
	if headerMap {
		h.HeaderMap = &corev3.HeaderMap{}
		for _, kv := range envoyHeaders {
			h.HeaderMap.Headers = append(h.HeaderMap.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
		}
	} else {
		h.Headers = map[string]string{}
		for _, kv := range envoyHeaders {
			h.Headers[kv[0]] = kv[1]
		}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: peer("203.0.113.7", 51234), Destination: peer("10.0.0.2", 8080),
		Request:         &authv3.AttributeContext_Request{Time: timestamppb.New(time.Unix(1767225600, 0)), Http: h},
		MetadataContext: &corev3.Metadata{},
	}}
}

// envoyRateLimitResponse is an answer to envoyRateLimitRequest: allowed,
// with the upstream headers tollgated adds.
func envoyRateLimitResponse(out *RateLimitResponse) {
	out.Reset()
	out.OverallCode = CodeOK
	s := out.AddStatus()
	s.Code, s.LimitRemaining = CodeOK, 41
	s.HasCurrentLimit, s.CurrentLimit = true, RateLimit{Name: nameRequests, RequestsPerUnit: 50, Unit: UnitSecond}
	s.HasDurationUntilReset, s.DurationUntilReset = true, time.Second
	out.AddRequestHeader(hdrAccount, valAccount)
	out.AddRequestHeader(hdrRequestID, valRequestID)
	out.AddRequestHeader(hdrUnits, valUnits)
}

// envoyCheckResponse is an allow with the headers tollgated adds upstream.
func envoyCheckResponse(out *CheckResponse) {
	out.Reset()
	out.AddHeader(hdrAccount, valAccount)
	out.AddHeader(hdrRequestID, valRequestID)
	out.AddHeader(hdrUnits, valUnits)
	out.AddHeader(hdrRateLimit, valRateLimit)
}

// The answers' bytes, as a caller has them: from a response, not made
// for each answer.
var (
	valAccount   = []byte("acme-prod")
	valRequestID = []byte("01JD5V9K6W4B2M7Q8R3T0X1Y2Z")
	valUnits     = []byte("1")
	valRateLimit = []byte(`"default";r=41;t=1`)
	nameRequests = []byte("requests")
	hdrAccount   = []byte("X-Tollgate-Account")
	hdrRequestID = []byte("X-Tollgate-Request-Id")
	hdrUnits     = []byte("X-Tollgate-Units")
	hdrRateLimit = []byte("RateLimit")
)

func TestNoAllocations(t *testing.T) {
	rlsMsg := mustMarshal(t, envoyRateLimitRequest(), false)
	checkMsg := mustMarshal(t, envoyCheckRequest(false), false)
	checkRawMsg := mustMarshal(t, envoyCheckRequest(true), false)
	healthMsg := mustMarshal(t, &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"}, false)
	rl, cr := new(RateLimitRequest), new(CheckRequest)
	rlOut, crOut := new(RateLimitResponse), new(CheckResponse)
	buf := make([]byte, 0, 1024)
	for name, f := range map[string]func(){
		"RateLimitRequest.Decode": func() { must(t, rl.Decode(rlsMsg)) },
		"CheckRequest.Decode":     func() { must(t, cr.Decode(checkMsg)) },
		"CheckRequest.Decode header_map": func() {
			must(t, cr.Decode(checkRawMsg))
		},
		"DecodeHealthCheck": func() {
			_, err := DecodeHealthCheck(healthMsg)
			must(t, err)
		},
		"AppendRateLimitResponse": func() {
			envoyRateLimitResponse(rlOut)
			buf = AppendRateLimitResponse(buf[:0], rlOut)
		},
		"AppendCheckResponse": func() {
			envoyCheckResponse(crOut)
			buf = AppendCheckResponse(buf[:0], crOut)
		},
		"AppendHealthCheckResponse": func() { buf = AppendHealthCheckResponse(buf[:0], HealthServing) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
	if len(cr.Headers) != len(envoyHeaders) || len(rl.Descriptors[0].Entries) != 2 {
		t.Fatalf("decoded %d headers, %d entries", len(cr.Headers), len(rl.Descriptors[0].Entries))
	}
}

func must(t testing.TB, err error) {
	if err != nil {
		t.Fatal(err)
	}
}

func BenchmarkDecodeRateLimitRequest(b *testing.B) {
	msg := mustMarshal(b, envoyRateLimitRequest(), false)
	var r RateLimitRequest
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Decode(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRateLimitRequestProto(b *testing.B) {
	msg := mustMarshal(b, envoyRateLimitRequest(), false)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := proto.Unmarshal(msg, &rlsv3.RateLimitRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchmarkDecodeCheck(b *testing.B, msg []byte) {
	var r CheckRequest
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Decode(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeCheckRequest(b *testing.B) {
	benchmarkDecodeCheck(b, mustMarshal(b, envoyCheckRequest(false), false))
}

func BenchmarkDecodeCheckRequestHeaderMap(b *testing.B) {
	benchmarkDecodeCheck(b, mustMarshal(b, envoyCheckRequest(true), false))
}

// BenchmarkDecodeCheckRequestMaxHeaders is the most map headers there may
// be, after 10 times as many entries repeating their keys.
func BenchmarkDecodeCheckRequestMaxHeaders(b *testing.B) {
	var fields [][]byte
	for i := range 11 * MaxHeaders {
		fields = append(fields, mapEntry("x-header-"+string(rune('a'+i%MaxHeaders/26))+string(rune('a'+i%MaxHeaders%26)), "value"))
	}
	benchmarkDecodeCheck(b, http(fields...))
}

func BenchmarkDecodeCheckRequestProto(b *testing.B) {
	msg := mustMarshal(b, envoyCheckRequest(false), false)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := proto.Unmarshal(msg, &authv3.CheckRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendRateLimitResponse(b *testing.B) {
	var out RateLimitResponse
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		envoyRateLimitResponse(&out)
		buf = AppendRateLimitResponse(buf[:0], &out)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAppendRateLimitResponseProto(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		m := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 41, DurationUntilReset: durationpb.New(time.Second),
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "requests", RequestsPerUnit: 50, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}}},
			RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "X-Tollgate-Account", Value: "acme-prod"},
				{Key: "X-Tollgate-Request-Id", Value: "01JD5V9K6W4B2M7Q8R3T0X1Y2Z"}, {Key: "X-Tollgate-Units", Value: "1"}}}
		if _, err := proto.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendCheckResponse(b *testing.B) {
	var out CheckResponse
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		envoyCheckResponse(&out)
		buf = AppendCheckResponse(buf[:0], &out)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAppendCheckResponseProto(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		m := &authv3.CheckResponse{Status: &rpcstatus.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			Headers: []*corev3.HeaderValueOption{overwrite("X-Tollgate-Account", "acme-prod"),
				overwrite("X-Tollgate-Request-Id", "01JD5V9K6W4B2M7Q8R3T0X1Y2Z"), overwrite("X-Tollgate-Units", "1"),
				overwrite("RateLimit", `"default";r=41;t=1`)}}}}
		if _, err := proto.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeHealthCheck(b *testing.B) {
	msg := mustMarshal(b, &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"}, false)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeHealthCheck(msg); err != nil {
			b.Fatal(err)
		}
	}
}
