package grpcapi

import (
	"context"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/valyala/fasthttp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/tollgated/tollgated/handover"
)

// Bounds of a CheckRequest, beyond the message size.
const (
	maxHeaders   = 128
	maxMethodLen = 24
	maxURILen    = 4096 // the shard refuses longer ones the same way
)

// droppedHeaders are headers of the original request that are not passed
// to the shard: the exchange's own (the original method and URI come from
// Envoy's attributes, not from what a client may have sent), and those
// that describe a connection or a body that is not there.
var droppedHeaders = map[string]bool{
	"x-original-method": true, "x-original-uri": true, "x-forwarded-method": true, "x-forwarded-uri": true,
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "keep-alive": true,
	"te": true, "trailer": true, "upgrade": true, "proxy-connection": true, "expect": true,
}

// decodeCheck turns an ext_authz CheckRequest into a forward-auth call, or
// an INVALID_ARGUMENT status saying what is wrong. The shard then reads the
// call as it reads Envoy's HTTP ext_authz call: the key's header, the
// routes, the count headers.
func decodeCheck(req *authv3.CheckRequest) (forwardCall, error) {
	h := req.GetAttributes().GetRequest().GetHttp()
	if h == nil {
		return forwardCall{}, invalid("attributes.request.http is required")
	}
	c := forwardCall{method: h.GetMethod(), uri: h.GetPath()}
	if !isToken(c.method) || len(c.method) > maxMethodLen {
		return c, invalid("attributes.request.http.method: an HTTP method of 1 to %d bytes", maxMethodLen)
	}
	if c.uri == "" || len(c.uri) > maxURILen || !fitsHeader(c.uri) {
		return c, invalid("attributes.request.http.path: 1 to %d bytes without control bytes", maxURILen)
	}
	n := len(h.GetHeaders()) + len(h.GetHeaderMap().GetHeaders())
	if n > maxHeaders {
		return c, invalid("attributes.request.http: %d headers, want at most %d", n, maxHeaders)
	}
	c.headers = make([]header, 0, n)
	var err error
	eachHeader(h, func(k, v string) bool {
		err = c.addHeader(k, v)
		return err == nil
	})
	return c, err
}

// eachHeader calls f with every header of h, both Envoy's map and its
// header map (a value, or its raw bytes when the value is empty), until f
// returns false. The head's size and the decoded call read the same
// fields through it.
func eachHeader(h *authv3.AttributeContext_HttpRequest, f func(name, value string) bool) {
	for k, v := range h.GetHeaders() {
		if !f(k, v) {
			return
		}
	}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		v := hv.GetValue()
		if v == "" {
			v = string(hv.GetRawValue())
		}
		if !f(hv.GetKey(), v) {
			return
		}
	}
}

func (c *forwardCall) addHeader(name, value string) error {
	if strings.HasPrefix(name, ":") || droppedHeaders[strings.ToLower(name)] {
		return nil
	}
	if !isToken(name) || len(name) > 256 {
		return invalid("header %.64q: a header name is an HTTP token of at most 256 bytes", name)
	}
	if !fitsHeader(value) {
		return invalid("header %s: a value holds no control byte", name)
	}
	// As an HTTP parser reads a field: without the spaces and tabs around
	// its value (RFC 9110 §5.5).
	c.headers = append(c.headers, header{name, strings.Trim(value, " \t")})
	return nil
}

// authorizationService answers ext_authz Check.
type authorizationService struct {
	authv3.UnimplementedAuthorizationServer
	s *Server
}

// Check is /v1/authz: the same shard decision, its headers and status
// carried in Envoy's terms.
func (a authorizationService) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	if headBytes(req.GetAttributes().GetRequest().GetHttp()) > a.s.cfg.MaxHeaderBytes {
		return headerTooLarge(), nil
	}
	call, err := decodeCheck(req)
	if err != nil {
		return nil, err
	}
	call.hint = call.headerValue(a.s.cfg.KeyHeader)
	c, err := a.s.decide(ctx, &call)
	if err != nil {
		return nil, err
	}
	defer handover.Release(c)
	return checkResponse(&c.Resp), nil
}

// headBytes is the size of h's request line and headers as an HTTP/1.1
// head: what the shards bound when a gateway forwards the request itself.
// Every header counts, including those not passed on (Host, …), as they
// count on the wire; the HTTP/2 pseudo-headers Envoy adds (:method,
// :path, :scheme, :authority) are the request line's, so they count only
// as the Host header :authority becomes when there is none.
func headBytes(h *authv3.AttributeContext_HttpRequest) int {
	n := len(h.GetMethod()) + 1 + len(h.GetPath()) + len(" HTTP/1.1\r\n") + len("\r\n")
	host, authority := false, 0
	eachHeader(h, func(k, v string) bool {
		switch {
		case k == ":authority":
			authority = len(v)
		case !strings.HasPrefix(k, ":"):
			n += len(k) + len(": ") + len(v) + len("\r\n")
			host = host || strings.EqualFold(k, "host")
		}
		return true
	})
	if !host && authority > 0 {
		n += len("host: ") + authority + len("\r\n")
	}
	return n
}

// tooLargeBody is the shards' problem document for a head over the bound.
const tooLargeBody = `{"type":"about:blank","title":"Request Header Fields Too Large","status":431,"code":"header-too-large"}`

// headerTooLarge denies a check whose request head is over the bound, as
// a shard answers such a request: 431 header-too-large. Nothing is
// decided or billed.
func headerTooLarge() *authv3.CheckResponse {
	denied := &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_RequestHeaderFieldsTooLarge},
		Body: tooLargeBody, Headers: []*corev3.HeaderValueOption{overwrite("Content-Type", "application/problem+json")}}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: "header-too-large"},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: denied}}
}

// upstreamHeaders are the answer headers an allowed request carries on to
// the service (as allowed_upstream_headers does in the HTTP setup).
func upstreamHeader(name string) bool {
	return isTollgateHeader(name) || strings.EqualFold(name, hdrRateLimit) || strings.EqualFold(name, hdrRateLimitPolicy)
}

// clientHeaders are the refusal headers the client is answered with.
var clientHeaders = []string{"Content-Type", "Retry-After", hdrRateLimit, hdrRateLimitPolicy, "WWW-Authenticate"}

// checkResponse mirrors a shard's forward-auth answer: 200 allows, with the
// X-Tollgate-* and RateLimit fields for the upstream request (replacing
// any a client sent); anything else denies with the shard's status,
// Retry-After, RateLimit fields and problem document.
func checkResponse(resp *fasthttp.Response) *authv3.CheckResponse {
	code := resp.StatusCode()
	if code == fasthttp.StatusOK {
		ok := &authv3.OkHttpResponse{}
		for k, v := range resp.Header.All() {
			if upstreamHeader(string(k)) {
				ok.Headers = append(ok.Headers, overwrite(string(k), string(v)))
			}
		}
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}}
	}
	denied := &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)}, Body: string(resp.Body())}
	for _, name := range clientHeaders {
		if v := resp.Header.Peek(name); len(v) > 0 {
			denied.Headers = append(denied.Headers, overwrite(name, string(v)))
		}
	}
	rc := codes.PermissionDenied
	if code == fasthttp.StatusUnauthorized {
		rc = codes.Unauthenticated
	}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(rc), Message: problemCode(resp.Body())},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: denied}}
}

func overwrite(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: name, Value: value},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}
