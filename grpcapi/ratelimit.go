package grpcapi

import (
	"context"
	"fmt"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Bounds of a RateLimitRequest, beyond the message size.
const (
	maxDescriptors = 16
	maxEntries     = 16
	maxEntryKey    = 64
	maxEntryValue  = 4096
	maxHits        = 1_000_000_000 // the largest count a route may name
	maxAccountLen  = 64
)

// Descriptor entries a rate-limit descriptor reads besides the account's.
const (
	entryMethod = "method"
	entryPath   = "path"
)

// rateLimitRules is how descriptors are read: the domain served and the
// entry that names the account.
type rateLimitRules struct {
	domain, accountEntry string
}

// decodeRateLimit turns a RateLimitRequest into one forward-auth call per
// descriptor, or an INVALID_ARGUMENT status saying what is wrong. Entries
// other than the account, method and path are ignored: a gateway sends
// what its actions produce.
func decodeRateLimit(req *rlsv3.RateLimitRequest, rules rateLimitRules) ([]forwardCall, error) {
	if req.GetDomain() != rules.domain {
		return nil, invalid("domain %q is not served here (want %q)", req.GetDomain(), rules.domain)
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 || len(ds) > maxDescriptors {
		return nil, invalid("%d descriptors: want 1 to %d", len(ds), maxDescriptors)
	}
	calls := make([]forwardCall, len(ds))
	for i, d := range ds {
		c, err := decodeDescriptor(d, req.GetHitsAddend(), rules)
		if err != nil {
			return nil, invalid("descriptors[%d]: %s", i, err)
		}
		calls[i] = c
	}
	return calls, nil
}

func decodeDescriptor(d *rlcommon.RateLimitDescriptor, hits uint32, rules rateLimitRules) (forwardCall, error) {
	c := forwardCall{method: fasthttp.MethodGet, uri: "/"}
	if d.GetLimit() != nil {
		return c, fmt.Errorf("a limit override is not accepted: limits are the account's policy")
	}
	if d.GetIsNegativeHits() {
		return c, fmt.Errorf("negative hits are not accepted: admitted work is billed, never refunded here")
	}
	n := uint64(hits)
	if h := d.GetHitsAddend(); h != nil {
		n = h.GetValue()
	}
	if n == 0 {
		n = 1 // unset: one hit, as Envoy means it
	}
	if n > maxHits {
		return c, fmt.Errorf("hits_addend %d: want at most %d", n, maxHits)
	}
	es := d.GetEntries()
	if len(es) > maxEntries {
		return c, fmt.Errorf("%d entries: want at most %d", len(es), maxEntries)
	}
	var seenMethod, seenPath bool
	for _, e := range es {
		k, v := e.GetKey(), e.GetValue()
		if len(k) == 0 || len(k) > maxEntryKey || len(v) > maxEntryValue {
			return c, fmt.Errorf("entry %.64q: keys are 1 to %d bytes, values at most %d", k, maxEntryKey, maxEntryValue)
		}
		switch k {
		case rules.accountEntry:
			if c.account != "" {
				return c, fmt.Errorf("entry %q given twice", k)
			}
			if !validAccount(v) {
				return c, fmt.Errorf("entry %q: an account id is 1 to %d bytes of [a-z0-9._-], starting with a letter or digit", k, maxAccountLen)
			}
			c.account = v
		case entryMethod:
			if seenMethod || !isToken(v) || len(v) > 24 {
				return c, fmt.Errorf("entry %q: once, an HTTP method of at most 24 bytes", k)
			}
			seenMethod, c.method = true, v
		case entryPath:
			if seenPath || v == "" || v[0] != '/' || !fitsHeader(v) {
				return c, fmt.Errorf("entry %q: once, a request target starting with / and without control bytes", k)
			}
			seenPath, c.uri = true, v
		}
	}
	if c.account == "" {
		return c, fmt.Errorf("no %q entry names the account", rules.accountEntry)
	}
	// Room for the key's header, which decideForAccount adds.
	c.headers = append(make([]header, 0, 2), header{hdrHitsAddend, strconv.FormatUint(n, 10)})
	c.hint = c.account
	return c, nil
}

// tollgateFields are the answer's X-Tollgate-* fields, for the upstream
// request: their values in one slice, pointed into.
func tollgateFields(resp *fasthttp.Response) []*corev3.HeaderValue {
	n := 0
	for k := range resp.Header.All() {
		if isTollgateHeader(string(k)) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	vals, hdrs := make([]corev3.HeaderValue, 0, n), make([]*corev3.HeaderValue, 0, n)
	for k, v := range resp.Header.All() {
		if isTollgateHeader(string(k)) && len(vals) < n {
			vals = append(vals, corev3.HeaderValue{Key: headerName(k), Value: string(v)})
			hdrs = append(hdrs, &vals[len(vals)-1])
		}
	}
	return hdrs
}

// validAccount is the admin API's account id rule.
func validAccount(s string) bool {
	if len(s) == 0 || len(s) > maxAccountLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "tollgated: "+format, args...)
}

// rateLimitService answers ShouldRateLimit.
type rateLimitService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit decides each descriptor in order, each as one
// forward-auth call for its account; the answer is OVER_LIMIT when any
// descriptor is. A descriptor admitted is billed even if a later one is
// over its limit, as each descriptor is its own limit.
func (r rateLimitService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	calls, err := decodeRateLimit(req, r.s.rules)
	if err != nil {
		return nil, err
	}
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(calls))}
	for i := range calls {
		st, hdrs, err := r.s.decideForAccount(ctx, &calls[i])
		if err != nil {
			return nil, err
		}
		out.Statuses[i] = st
		if st.Code == rlsv3.RateLimitResponse_OK {
			out.RequestHeadersToAdd = append(out.RequestHeadersToAdd, hdrs...)
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				out.ResponseHeadersToAdd = hdrs // the first refusal's reasons
			}
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return out, nil
}

// rateStatus reads a shard's forward-auth answer as a descriptor's status
// and its headers: 200 is OK, with the answer's X-Tollgate-* fields (the
// account, the request id, the units billed) for the upstream request; a
// refusal (an admission refusal, or a route the policy does
// not admit) is OVER_LIMIT with its problem code in X-Tollgate-Reason and
// the answer's Retry-After and RateLimit fields; a problem with the
// descriptor's method or path is INVALID_ARGUMENT.
func rateStatus(resp *fasthttp.Response) (*rlsv3.RateLimitResponse_DescriptorStatus, []*corev3.HeaderValue, error) {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if q, ok := requestQuota(resp.Header.Peek(hdrRateLimitPolicy)); ok {
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: "requests", RequestsPerUnit: q, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	}
	if left, secs, ok := requestsLeft(resp.Header.Peek(hdrRateLimit)); ok {
		st.LimitRemaining = left
		st.DurationUntilReset = durationpb.New(secondsDuration(secs))
	}
	code := resp.StatusCode()
	if code == fasthttp.StatusOK {
		return st, tollgateFields(resp), nil
	}
	problem := problemCode(resp.Body())
	if code == fasthttp.StatusBadRequest {
		return nil, nil, invalid("the descriptor's method or path is refused: %s", problem)
	}
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	hdrs := []*corev3.HeaderValue{{Key: hdrReason, Value: problem}}
	for _, name := range []string{"Retry-After", hdrRateLimit, hdrRateLimitPolicy} {
		if v := resp.Header.Peek(name); len(v) > 0 {
			hdrs = append(hdrs, &corev3.HeaderValue{Key: name, Value: string(v)})
		}
	}
	return st, hdrs, nil
}
