package grpcmsg

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// checkEncoding checks an encoder's output, appended after a prefix: the
// prefix is kept, proto.Unmarshal reads the message back as want, and the
// bytes are proto.Marshal's (deterministic, so that it is one encoding).
func checkEncoding(t *testing.T, prefix, out []byte, want, got proto.Message) {
	t.Helper()
	if !bytes.HasPrefix(out, prefix) {
		t.Fatalf("the prefix is gone: %x", out)
	}
	out = out[len(prefix):]
	if err := proto.Unmarshal(out, got); err != nil {
		t.Fatalf("proto.Unmarshal: %v\n%x", err, out)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if m := mustMarshal(t, want, true); !bytes.Equal(out, m) {
		t.Fatalf("not proto.Marshal's bytes:\n got  %x\n want %x", out, m)
	}
}

func randEnum(r *rand.Rand) int32 {
	switch r.IntN(6) {
	case 0:
		return -1
	case 1:
		return math.MinInt32
	case 2:
		return math.MaxInt32
	default:
		return int32(r.IntN(4))
	}
}

func randDuration(r *rand.Rand) time.Duration {
	switch r.IntN(5) {
	case 0:
		return math.MaxInt64
	case 1:
		return math.MinInt64
	case 2:
		return -time.Duration(r.Int64N(1e12))
	default:
		return time.Duration(r.Int64N(1e12))
	}
}

// randRateLimitResponse fills out at random, and returns the generated
// message it stands for.
func randRateLimitResponse(r *rand.Rand, out *RateLimitResponse) *rlsv3.RateLimitResponse {
	out.Reset()
	out.OverallCode = randEnum(r)
	want := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(out.OverallCode)}
	for range r.IntN(MaxDescriptors + 1) {
		s := out.AddStatus()
		s.Code, s.LimitRemaining = randEnum(r), randU32(r)
		ws := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(s.Code), LimitRemaining: s.LimitRemaining}
		if r.IntN(2) == 0 {
			s.HasCurrentLimit = true
			s.CurrentLimit = RateLimit{Name: []byte(randString(r)), RequestsPerUnit: randU32(r), Unit: randEnum(r)}
			ws.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: string(s.CurrentLimit.Name),
				RequestsPerUnit: s.CurrentLimit.RequestsPerUnit, Unit: rlsv3.RateLimitResponse_RateLimit_Unit(s.CurrentLimit.Unit)}
		}
		if r.IntN(2) == 0 {
			s.HasDurationUntilReset, s.DurationUntilReset = true, randDuration(r)
			ws.DurationUntilReset = durationpb.New(s.DurationUntilReset)
		}
		want.Statuses = append(want.Statuses, ws)
	}
	for range r.IntN(MaxHeadersToAdd + 1) {
		k, v := randString(r), randString(r)
		out.AddResponseHeader([]byte(k), []byte(v))
		want.ResponseHeadersToAdd = append(want.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: v})
	}
	for range r.IntN(MaxHeadersToAdd + 1) {
		k, v := randString(r), randString(r)
		out.AddRequestHeader([]byte(k), []byte(v))
		want.RequestHeadersToAdd = append(want.RequestHeadersToAdd, &corev3.HeaderValue{Key: k, Value: v})
	}
	return want
}

func TestAppendRateLimitResponse(t *testing.T) {
	r := newRand(4)
	var out RateLimitResponse
	buf := make([]byte, 0, 64)
	for range 500 {
		want := randRateLimitResponse(r, &out)
		buf = AppendRateLimitResponse(append(buf[:0], "prefix"...), &out)
		checkEncoding(t, []byte("prefix"), buf, want, &rlsv3.RateLimitResponse{})
	}
}

// overwrite is grpcapi's HeaderValueOption for a header.
func overwrite(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: name, Value: value},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

func randCheckResponse(r *rand.Rand, out *CheckResponse) *authv3.CheckResponse {
	out.Reset()
	out.Code, out.Message = randEnum(r), []byte(randString(r))
	want := &authv3.CheckResponse{Status: &rpcstatus.Status{Code: out.Code, Message: string(out.Message)}}
	var hs []*corev3.HeaderValueOption
	for range r.IntN(MaxHeadersToAdd + 1) {
		k, v := randString(r), randString(r)
		out.AddHeader([]byte(k), []byte(v))
		hs = append(hs, overwrite(k, v))
	}
	if out.Denied = r.IntN(2) == 0; out.Denied {
		out.HTTPStatus, out.Body = randEnum(r), []byte(randString(r))
		want.HttpResponse = &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(out.HTTPStatus)}, Headers: hs, Body: string(out.Body)}}
	} else {
		want.HttpResponse = &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: hs}}
	}
	return want
}

func TestAppendCheckResponse(t *testing.T) {
	r := newRand(5)
	var out CheckResponse
	var buf []byte
	for range 500 {
		want := randCheckResponse(r, &out)
		buf = AppendCheckResponse(append(buf[:0], 1, 2, 3), &out)
		checkEncoding(t, []byte{1, 2, 3}, buf, want, &authv3.CheckResponse{})
	}
}

// TestCheckResponseAsGrpcapi builds what grpcapi's checkResponse and
// headerTooLarge build.
func TestCheckResponseAsGrpcapi(t *testing.T) {
	const tooLargeBody = `{"type":"about:blank","title":"Request Header Fields Too Large","status":431,"code":"header-too-large"}`
	var out CheckResponse
	out.Code, out.Message = int32(codes.PermissionDenied), []byte("header-too-large")
	out.Denied, out.HTTPStatus, out.Body = true, int32(typev3.StatusCode_RequestHeaderFieldsTooLarge), []byte(tooLargeBody)
	out.AddHeader([]byte("Content-Type"), []byte("application/problem+json"))
	want := &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: "header-too-large"},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_RequestHeaderFieldsTooLarge},
			Body:   tooLargeBody, Headers: []*corev3.HeaderValueOption{overwrite("Content-Type", "application/problem+json")}}}}
	checkEncoding(t, nil, AppendCheckResponse(nil, &out), want, &authv3.CheckResponse{})

	// An allow without headers: status {} and ok_response {}, both present.
	out.Reset()
	want = &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}}
	checkEncoding(t, nil, AppendCheckResponse(nil, &out), want, &authv3.CheckResponse{})

	// A refusal with an empty header value and an empty body.
	out.Reset()
	out.Code, out.Denied, out.HTTPStatus = int32(codes.Unauthenticated), true, 401
	out.AddHeader([]byte("WWW-Authenticate"), nil)
	want = &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.Unauthenticated)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: 401}, Headers: []*corev3.HeaderValueOption{overwrite("WWW-Authenticate", "")}}}}
	checkEncoding(t, nil, AppendCheckResponse(nil, &out), want, &authv3.CheckResponse{})
}

func TestAppendHealthCheckResponse(t *testing.T) {
	for _, st := range []int32{HealthUnknown, HealthServing, HealthNotServing, HealthServiceUnknown, -1, math.MaxInt32} {
		want := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_ServingStatus(st)}
		checkEncoding(t, []byte("x"), AppendHealthCheckResponse([]byte("x"), st), want, &healthpb.HealthCheckResponse{})
	}
}

func TestResponseCapacity(t *testing.T) {
	var rl RateLimitResponse // the zero value is ready
	for i := range MaxDescriptors {
		if rl.AddStatus() == nil {
			t.Fatalf("status %d refused", i)
		}
	}
	if rl.AddStatus() != nil {
		t.Fatal("a status past MaxDescriptors")
	}
	for i := range MaxHeadersToAdd {
		if !rl.AddRequestHeader([]byte("k"), nil) || !rl.AddResponseHeader(nil, []byte("v")) {
			t.Fatalf("header %d refused", i)
		}
	}
	if rl.AddRequestHeader(nil, nil) || rl.AddResponseHeader(nil, nil) {
		t.Fatal("a header past MaxHeadersToAdd")
	}
	rl.Statuses[3].Code = CodeOverLimit
	rl.Reset()
	if len(rl.Statuses) != 0 || len(rl.RequestHeadersToAdd) != 0 || rl.statuses[3].Code != 0 || rl.requestHeaders[0].Key != nil {
		t.Fatalf("after Reset: %+v", rl)
	}
	if s := rl.AddStatus(); s == nil || s.Code != 0 {
		t.Fatal("AddStatus after Reset")
	}

	var cr CheckResponse
	for range MaxHeadersToAdd {
		if !cr.AddHeader([]byte("k"), []byte("v")) {
			t.Fatal("header refused")
		}
	}
	if cr.AddHeader(nil, nil) {
		t.Fatal("a header past MaxHeadersToAdd")
	}
	cr.Denied, cr.Body = true, []byte("b")
	cr.Reset()
	if cr.Denied || cr.Body != nil || len(cr.Headers) != 0 || cr.headers[0].Key != nil {
		t.Fatalf("after Reset: %+v", cr)
	}
}
