package grpcmsg

import (
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxHeadersToAdd bounds each list of headers an answer carries: a
// RateLimitResponse's response and request headers, a CheckResponse's.
// It is the size of their backing arrays; the Add methods refuse more.
const MaxHeadersToAdd = 8

// Values of envoy.service.ratelimit.v3.RateLimitResponse.Code.
const (
	CodeUnknown   int32 = 0
	CodeOK        int32 = 1
	CodeOverLimit int32 = 2
)

// Values of envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit.
const (
	UnitUnknown int32 = 0
	UnitSecond  int32 = 1
	UnitMinute  int32 = 2
	UnitHour    int32 = 3
	UnitDay     int32 = 4
	UnitMonth   int32 = 5
	UnitYear    int32 = 6
	UnitWeek    int32 = 7
)

// appendOverwriteIfExistsOrAdd is envoy.config.core.v3.HeaderValueOption's
// append_action OVERWRITE_IF_EXISTS_OR_ADD, on every header of a
// CheckResponse: the header replaces any of its name, as a client must
// not supply tollgated's headers.
const appendOverwriteIfExistsOrAdd = 2

// Field numbers of envoy.service.ratelimit.v3.RateLimitResponse and the
// messages in it.
const (
	rlrOverallCode     = 1 // Code
	rlrStatuses        = 2 // repeated DescriptorStatus
	rlrResponseHeaders = 3 // repeated envoy.config.core.v3.HeaderValue
	rlrRequestHeaders  = 4 // repeated envoy.config.core.v3.HeaderValue

	statusCode           = 1 // DescriptorStatus.code: Code
	statusCurrentLimit   = 2 // DescriptorStatus.current_limit: RateLimit
	statusLimitRemaining = 3 // DescriptorStatus.limit_remaining: uint32
	statusUntilReset     = 4 // DescriptorStatus.duration_until_reset: google.protobuf.Duration

	limitRequestsPerUnit = 1 // RateLimit.requests_per_unit: uint32
	limitUnit            = 2 // RateLimit.unit: Unit
	limitName            = 3 // RateLimit.name: string

	durationSeconds = 1 // int64
	durationNanos   = 2 // int32
)

// Field numbers of envoy.service.auth.v3.CheckResponse and the messages in
// it.
const (
	crStatus         = 1 // google.rpc.Status
	crDeniedResponse = 2 // DeniedHttpResponse, of the http_response oneof
	crOkResponse     = 3 // OkHttpResponse, of the http_response oneof

	rpcCode    = 1 // google.rpc.Status.code: int32
	rpcMessage = 2 // google.rpc.Status.message: string

	deniedStatus  = 1 // DeniedHttpResponse.status: envoy.type.v3.HttpStatus
	deniedHeaders = 2 // DeniedHttpResponse.headers: repeated HeaderValueOption
	deniedBody    = 3 // DeniedHttpResponse.body: string
	okHeaders     = 2 // OkHttpResponse.headers: repeated HeaderValueOption

	httpStatusCode = 1 // envoy.type.v3.HttpStatus.code: StatusCode

	hvoHeader       = 1 // HeaderValueOption.header: HeaderValue
	hvoAppendAction = 3 // HeaderValueOption.append_action: HeaderAppendAction
)

// A HeaderValue is envoy.config.core.v3.HeaderValue: a header to add.
// Both are strings to proto, so they must be valid UTF-8 (see the package
// documentation).
type HeaderValue struct {
	Key, Value []byte
}

// A RateLimitResponse is the envoy.service.ratelimit.v3.RateLimitResponse
// tollgated answers. The Add methods fill backing arrays inside it, so
// building one allocates nothing. The zero value is empty, and Reset
// empties one for reuse. Like a request, it is large and points into
// itself: reuse one, do not copy it.
type RateLimitResponse struct {
	OverallCode          int32 // a Code* value
	Statuses             []DescriptorStatus
	ResponseHeadersToAdd []HeaderValue
	RequestHeadersToAdd  []HeaderValue

	statuses        [MaxDescriptors]DescriptorStatus
	responseHeaders [MaxHeadersToAdd]HeaderValue
	requestHeaders  [MaxHeadersToAdd]HeaderValue
}

// A DescriptorStatus is RateLimitResponse.DescriptorStatus: one
// descriptor's answer.
type DescriptorStatus struct {
	Code int32 // a Code* value
	// CurrentLimit is sent when HasCurrentLimit.
	HasCurrentLimit bool
	CurrentLimit    RateLimit
	LimitRemaining  uint32
	// DurationUntilReset is sent when HasDurationUntilReset, as a
	// google.protobuf.Duration (durationpb.New's conversion).
	HasDurationUntilReset bool
	DurationUntilReset    time.Duration
}

// A RateLimit is RateLimitResponse.RateLimit.
type RateLimit struct {
	Name            []byte // a string to proto: valid UTF-8
	RequestsPerUnit uint32
	Unit            int32 // a Unit* value
}

// Reset empties r for a new answer, keeping its backing arrays.
func (r *RateLimitResponse) Reset() {
	clear(r.statuses[:min(len(r.Statuses), MaxDescriptors)])
	clear(r.responseHeaders[:min(len(r.ResponseHeadersToAdd), MaxHeadersToAdd)])
	clear(r.requestHeaders[:min(len(r.RequestHeadersToAdd), MaxHeadersToAdd)])
	r.OverallCode = CodeUnknown
	r.Statuses = r.statuses[:0]
	r.ResponseHeadersToAdd = r.responseHeaders[:0]
	r.RequestHeadersToAdd = r.requestHeaders[:0]
}

// AddStatus appends a zero status to r.Statuses and returns it, or nil
// when r holds MaxDescriptors already.
func (r *RateLimitResponse) AddStatus() *DescriptorStatus {
	if r.Statuses == nil {
		r.Statuses = r.statuses[:0]
	}
	n := len(r.Statuses)
	if n == cap(r.Statuses) {
		return nil
	}
	r.Statuses = r.Statuses[:n+1]
	r.Statuses[n] = DescriptorStatus{}
	return &r.Statuses[n]
}

// AddResponseHeader appends a header for the client, reporting false when
// MaxHeadersToAdd are there already.
func (r *RateLimitResponse) AddResponseHeader(key, value []byte) bool {
	return addHeader(&r.ResponseHeadersToAdd, r.responseHeaders[:0], key, value)
}

// AddRequestHeader appends a header for the upstream request, reporting
// false when MaxHeadersToAdd are there already.
func (r *RateLimitResponse) AddRequestHeader(key, value []byte) bool {
	return addHeader(&r.RequestHeadersToAdd, r.requestHeaders[:0], key, value)
}

// addHeader appends to *hs within its capacity, starting *hs on backing
// (its backing array) when it is nil.
func addHeader(hs *[]HeaderValue, backing []HeaderValue, key, value []byte) bool {
	if *hs == nil {
		*hs = backing
	}
	if len(*hs) == cap(*hs) {
		return false
	}
	*hs = append(*hs, HeaderValue{Key: key, Value: value})
	return true
}

// AppendRateLimitResponse appends r, encoded, to dst. It allocates only
// when dst has too little room, and then once.
func AppendRateLimitResponse(dst []byte, r *RateLimitResponse) []byte {
	dst = slices.Grow(dst, r.size())
	dst = appendVarint(dst, rlrOverallCode, enum(r.OverallCode))
	for i := range r.Statuses {
		s := &r.Statuses[i]
		dst = appendMessage(dst, rlrStatuses, s.size())
		dst = s.appendTo(dst)
	}
	dst = appendHeaderValues(dst, rlrResponseHeaders, r.ResponseHeadersToAdd)
	return appendHeaderValues(dst, rlrRequestHeaders, r.RequestHeadersToAdd)
}

func (r *RateLimitResponse) size() int {
	n := sizeVarint(rlrOverallCode, enum(r.OverallCode))
	for i := range r.Statuses {
		n += sizeMessage(rlrStatuses, r.Statuses[i].size())
	}
	return n + sizeHeaderValues(rlrResponseHeaders, r.ResponseHeadersToAdd) +
		sizeHeaderValues(rlrRequestHeaders, r.RequestHeadersToAdd)
}

func (s *DescriptorStatus) size() int {
	n := sizeVarint(statusCode, enum(s.Code))
	if s.HasCurrentLimit {
		n += sizeMessage(statusCurrentLimit, s.CurrentLimit.size())
	}
	n += sizeVarint(statusLimitRemaining, uint64(s.LimitRemaining))
	if s.HasDurationUntilReset {
		n += sizeMessage(statusUntilReset, sizeDuration(s.DurationUntilReset))
	}
	return n
}

func (s *DescriptorStatus) appendTo(dst []byte) []byte {
	dst = appendVarint(dst, statusCode, enum(s.Code))
	if s.HasCurrentLimit {
		dst = appendMessage(dst, statusCurrentLimit, s.CurrentLimit.size())
		dst = s.CurrentLimit.appendTo(dst)
	}
	dst = appendVarint(dst, statusLimitRemaining, uint64(s.LimitRemaining))
	if s.HasDurationUntilReset {
		dst = appendMessage(dst, statusUntilReset, sizeDuration(s.DurationUntilReset))
		dst = appendDuration(dst, s.DurationUntilReset)
	}
	return dst
}

func (l *RateLimit) size() int {
	return sizeVarint(limitRequestsPerUnit, uint64(l.RequestsPerUnit)) +
		sizeVarint(limitUnit, enum(l.Unit)) + sizeString(limitName, l.Name)
}

func (l *RateLimit) appendTo(dst []byte) []byte {
	dst = appendVarint(dst, limitRequestsPerUnit, uint64(l.RequestsPerUnit))
	dst = appendVarint(dst, limitUnit, enum(l.Unit))
	return appendString(dst, limitName, l.Name)
}

// splitDuration is d as google.protobuf.Duration's seconds and nanos, both
// of d's sign, as durationpb.New converts it.
func splitDuration(d time.Duration) (secs int64, nanos int32) {
	ns := d.Nanoseconds()
	secs = ns / 1e9
	return secs, int32(ns - secs*1e9)
}

func sizeDuration(d time.Duration) int {
	secs, nanos := splitDuration(d)
	return sizeVarint(durationSeconds, uint64(secs)) + sizeVarint(durationNanos, enum(nanos))
}

func appendDuration(dst []byte, d time.Duration) []byte {
	secs, nanos := splitDuration(d)
	dst = appendVarint(dst, durationSeconds, uint64(secs))
	return appendVarint(dst, durationNanos, enum(nanos))
}

// sizeHeaderValue is the size of h's contents as a HeaderValue.
func sizeHeaderValue(h *HeaderValue) int {
	return sizeString(hvKey, h.Key) + sizeString(hvValue, h.Value)
}

func appendHeaderValue(dst []byte, h *HeaderValue) []byte {
	dst = appendString(dst, hvKey, h.Key)
	return appendString(dst, hvValue, h.Value)
}

// sizeHeaderValues is the size of hs as repeated HeaderValue field num.
func sizeHeaderValues(num protowire.Number, hs []HeaderValue) int {
	n := 0
	for i := range hs {
		n += sizeMessage(num, sizeHeaderValue(&hs[i]))
	}
	return n
}

func appendHeaderValues(dst []byte, num protowire.Number, hs []HeaderValue) []byte {
	for i := range hs {
		dst = appendMessage(dst, num, sizeHeaderValue(&hs[i]))
		dst = appendHeaderValue(dst, &hs[i])
	}
	return dst
}

// A CheckResponse is the envoy.service.auth.v3.CheckResponse tollgated
// answers: a status, and either an ok_response carrying headers for the
// upstream request or a denied_response carrying the client's answer.
// Every header is a HeaderValueOption whose append_action is
// OVERWRITE_IF_EXISTS_OR_ADD. The zero value is an OK answer without
// headers, and Reset empties one for reuse. AddHeader fills a backing
// array inside it: like a request, it points into itself, so reuse one
// and do not copy it.
type CheckResponse struct {
	// Code and Message are the google.rpc.Status, always sent.
	Code    int32 // a google.golang.org/grpc/codes value
	Message []byte
	// Denied selects denied_response; otherwise the answer is
	// ok_response, sent even without headers.
	Denied bool
	// HTTPStatus is denied_response.status.code (envoy.type.v3.StatusCode),
	// always sent when Denied.
	HTTPStatus int32
	// Headers are ok_response's headers or denied_response's.
	Headers []HeaderValue
	// Body is denied_response.body: a string to proto.
	Body []byte

	headers [MaxHeadersToAdd]HeaderValue
}

// Reset empties r for a new answer, keeping its backing array.
func (r *CheckResponse) Reset() {
	clear(r.headers[:min(len(r.Headers), MaxHeadersToAdd)])
	r.Code, r.Message, r.Denied, r.HTTPStatus, r.Body = 0, nil, false, 0, nil
	r.Headers = r.headers[:0]
}

// AddHeader appends a header, reporting false when MaxHeadersToAdd are
// there already.
func (r *CheckResponse) AddHeader(key, value []byte) bool {
	return addHeader(&r.Headers, r.headers[:0], key, value)
}

// AppendCheckResponse appends r, encoded, to dst. It allocates only when
// dst has too little room, and then once.
func AppendCheckResponse(dst []byte, r *CheckResponse) []byte {
	dst = slices.Grow(dst, r.size())
	dst = appendMessage(dst, crStatus, r.statusSize())
	dst = appendVarint(dst, rpcCode, enum(r.Code))
	dst = appendString(dst, rpcMessage, r.Message)
	if r.Denied {
		dst = appendMessage(dst, crDeniedResponse, r.deniedSize())
		dst = appendMessage(dst, deniedStatus, sizeVarint(httpStatusCode, enum(r.HTTPStatus)))
		dst = appendVarint(dst, httpStatusCode, enum(r.HTTPStatus))
		dst = appendHeaderOptions(dst, deniedHeaders, r.Headers)
		return appendString(dst, deniedBody, r.Body)
	}
	dst = appendMessage(dst, crOkResponse, sizeHeaderOptions(okHeaders, r.Headers))
	return appendHeaderOptions(dst, okHeaders, r.Headers)
}

func (r *CheckResponse) size() int {
	n := sizeMessage(crStatus, r.statusSize())
	if r.Denied {
		return n + sizeMessage(crDeniedResponse, r.deniedSize())
	}
	return n + sizeMessage(crOkResponse, sizeHeaderOptions(okHeaders, r.Headers))
}

func (r *CheckResponse) statusSize() int {
	return sizeVarint(rpcCode, enum(r.Code)) + sizeString(rpcMessage, r.Message)
}

func (r *CheckResponse) deniedSize() int {
	return sizeMessage(deniedStatus, sizeVarint(httpStatusCode, enum(r.HTTPStatus))) +
		sizeHeaderOptions(deniedHeaders, r.Headers) + sizeString(deniedBody, r.Body)
}

// sizeHeaderOption is the size of h's contents as a HeaderValueOption.
func sizeHeaderOption(h *HeaderValue) int {
	return sizeMessage(hvoHeader, sizeHeaderValue(h)) + sizeVarint(hvoAppendAction, appendOverwriteIfExistsOrAdd)
}

// sizeHeaderOptions is the size of hs as repeated HeaderValueOption field
// num.
func sizeHeaderOptions(num protowire.Number, hs []HeaderValue) int {
	n := 0
	for i := range hs {
		n += sizeMessage(num, sizeHeaderOption(&hs[i]))
	}
	return n
}

func appendHeaderOptions(dst []byte, num protowire.Number, hs []HeaderValue) []byte {
	for i := range hs {
		h := &hs[i]
		dst = appendMessage(dst, num, sizeHeaderOption(h))
		dst = appendMessage(dst, hvoHeader, sizeHeaderValue(h))
		dst = appendHeaderValue(dst, h)
		dst = appendVarint(dst, hvoAppendAction, appendOverwriteIfExistsOrAdd)
	}
	return dst
}
