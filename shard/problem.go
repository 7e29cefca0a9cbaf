package shard

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/core"
)

// denyStatus maps every deny reason to its HTTP status. The table is
// indexed by the reason's stable slot, so a new reason without a status
// fails TestEveryReasonHasAStatus.
var denyStatus = [core.NumDenyReasons]int{
	core.DenyUnknownPrincipal:       fasthttp.StatusUnauthorized,
	core.DenyAccountSuspended:       fasthttp.StatusForbidden,
	core.DenyAccountClosed:          fasthttp.StatusForbidden,
	core.DenySnapshotExpired:        fasthttp.StatusServiceUnavailable,
	core.DenyMissingPermission:      fasthttp.StatusForbidden,
	core.DenyRequestTooLarge:        fasthttp.StatusRequestEntityTooLarge,
	core.DenyUnpricedOperation:      fasthttp.StatusUnprocessableEntity,
	core.DenyEmptyWorkload:          fasthttp.StatusUnprocessableEntity,
	core.DenyCostOverflow:           fasthttp.StatusUnprocessableEntity,
	core.DenyUnpriceableUnderLimits: fasthttp.StatusUnprocessableEntity,
	core.DenyRequestRateLimited:     fasthttp.StatusTooManyRequests,
	core.DenyRateLimited:            fasthttp.StatusTooManyRequests,
	core.DenyConcurrencyLimited:     fasthttp.StatusTooManyRequests,
	core.DenyLeaseUnavailable:       fasthttp.StatusServiceUnavailable,
	core.DenyLeaseExpired:           fasthttp.StatusServiceUnavailable,
	core.DenyLeaseExhausted:         fasthttp.StatusServiceUnavailable,
	core.DenyOverageCapExhausted:    fasthttp.StatusServiceUnavailable,
	core.DenyAccountingBackpressure: fasthttp.StatusServiceUnavailable,
	core.DenyCapacityUnavailable:    fasthttp.StatusServiceUnavailable,
	core.DenyFundingExpiredAtStart:  fasthttp.StatusConflict,
	core.DenyBalanceExhausted:       fasthttp.StatusPaymentRequired,
	core.DenyBalanceInsufficient:    fasthttp.StatusPaymentRequired,
	core.DenyStorageFull:            fasthttp.StatusServiceUnavailable,
	core.DenyStorageFailed:          fasthttp.StatusServiceUnavailable,
}

var denyTitle = [core.NumDenyReasons]string{
	core.DenyUnknownPrincipal:       "Unknown credential",
	core.DenyAccountSuspended:       "Account suspended",
	core.DenyAccountClosed:          "Account closed",
	core.DenySnapshotExpired:        "Policy is stale; retry shortly",
	core.DenyMissingPermission:      "Permission not granted",
	core.DenyRequestTooLarge:        "Request has too many items",
	core.DenyUnpricedOperation:      "Operation is not priced",
	core.DenyEmptyWorkload:          "Workload is empty",
	core.DenyCostOverflow:           "Cost overflows",
	core.DenyUnpriceableUnderLimits: "Cost exceeds the rate burst",
	core.DenyRequestRateLimited:     "Request rate limited",
	core.DenyRateLimited:            "Cost rate limited",
	core.DenyConcurrencyLimited:     "Too many requests in flight",
	core.DenyLeaseUnavailable:       "Funding not yet available",
	core.DenyLeaseExpired:           "Funding lease expired",
	core.DenyLeaseExhausted:         "Funding lease exhausted",
	core.DenyOverageCapExhausted:    "Overage cap reached",
	core.DenyAccountingBackpressure: "Accounting is busy",
	core.DenyCapacityUnavailable:    "No execution capacity",
	core.DenyFundingExpiredAtStart:  "Funding lapsed before start",
	core.DenyBalanceExhausted:       "Balance exhausted",
	core.DenyBalanceInsufficient:    "Balance insufficient",
	core.DenyStorageFull:            "Usage storage is full; retry shortly",
	core.DenyStorageFailed:          "Usage storage failed; retry elsewhere",
}

// unavailableRetry is the Retry-After of a 503 that knows no better time:
// funding on its way, accounting backed up, capacity or a policy refresh
// pending are each a matter of a moment, and a second keeps the retries
// of many clients from arriving while the shard still waits.
const unavailableRetry = int64(time.Second)

// writeDenial answers a refusal as application/problem+json, with
// Retry-After (whole seconds, rounded up) when a transient refusal knows
// when to retry, and on every 503 (unavailableRetry when it does not).
func (s *Shard) writeDenial(resp *fasthttp.Response, d core.Denial) {
	r := d.Reason
	if d.RetryAfter <= 0 && denyStatus[r] == fasthttp.StatusServiceUnavailable {
		d.RetryAfter = unavailableRetry
	}
	b := s.out[:0]
	b = append(b, `{"type":"about:blank","title":"`...)
	b = append(b, denyTitle[r]...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(denyStatus[r]), 10)
	b = append(b, `,"code":"`...)
	b = append(b, r.Code()...)
	b = append(b, `","retry":"`...)
	b = append(b, r.Retry().String()...)
	b = append(b, '"')
	if d.RetryAfter > 0 {
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, (d.RetryAfter+999_999)/1e6, 10)
		secs := (d.RetryAfter + 999_999_999) / 1e9
		resp.Header.SetBytesV("Retry-After", strconv.AppendInt(s.hdr[:0], secs, 10))
	}
	if d.Scope != core.ScopeNone {
		b = append(b, `,"scope":"`...)
		b = append(b, d.Scope.String()...)
		b = append(b, '"')
	}
	if r == core.DenyBalanceInsufficient || r == core.DenyLeaseExhausted {
		b = append(b, `,"remaining":`...)
		b = strconv.AppendUint(b, uint64(d.Remaining), 10)
	}
	if r == core.DenyBalanceExhausted || r == core.DenyBalanceInsufficient {
		b = append(b, `,"reset_at":`...)
		b = appendResetAt(b, d.ResetAt)
	}
	b = append(b, '}')
	s.out = b
	if r == core.DenyUnknownPrincipal {
		resp.Header.SetBytesV("WWW-Authenticate", bearerChallenge)
	}
	resp.SetStatusCode(denyStatus[r])
	resp.Header.SetContentTypeBytes(problemJSON)
	resp.SetBody(b)
}

var (
	bearerChallenge = []byte(`Bearer realm="tollgated"`)
	problemJSON     = []byte("application/problem+json")
	applicationJSON = []byte("application/json")
)

// writeProblem answers a request error that is not an admission refusal:
// bad JSON, a bad reservation id, an unknown route.
func (s *Shard) writeProblem(resp *fasthttp.Response, status int, code, title string) {
	b := s.out[:0]
	b = append(b, `{"type":"about:blank","title":"`...)
	b = append(b, title...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"code":"`...)
	b = append(b, code...)
	b = append(b, `"}`...)
	s.out = b
	resp.SetStatusCode(status)
	resp.Header.SetContentTypeBytes(problemJSON)
	resp.SetBody(b)
}

// writeFieldProblem answers a request refused at decoding: the kind's
// status, code and title, what the field must be (detail) and, when there
// is one, the field's path (s.field), escaped — a path may repeat a key
// the client sent.
func (s *Shard) writeFieldProblem(resp *fasthttp.Response, p fieldProblem) {
	k := problemKinds[p.kind]
	b := s.out[:0]
	b = append(b, `{"type":"about:blank","title":"`...)
	b = append(b, k.title...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(k.status), 10)
	b = append(b, `,"code":"`...)
	b = append(b, k.code...)
	b = append(b, `","detail":"`...)
	b = append(b, p.detail...)
	b = append(b, '"')
	if len(s.field) > 0 {
		b = append(b, `,"field":"`...)
		b = appendEscaped(b, s.field)
		b = append(b, '"')
	}
	b = append(b, '}')
	s.out = b
	resp.SetStatusCode(k.status)
	resp.Header.SetContentTypeBytes(problemJSON)
	resp.SetBody(b)
}
