package grpcapi

import (
	"bytes"
	"math"

	"github.com/tollgated/tollgated/decimal"
)

// What a shard's forward-auth answer carries, as read here.
const (
	hdrReason          = "X-Tollgate-Reason" // the refusal's problem code, for the gateway's client
	hdrRateLimit       = "RateLimit"
	hdrRateLimitPolicy = "RateLimit-Policy"
)

var unknownCode = []byte("unknown")

// problemCode is the code of a shard's problem document, read in place, or
// "unknown" when the body is not one (a transport's own answer always
// is). The shards write the code as a plain JSON string of a stable
// problem code: lower-case letters and dashes, no escapes.
func problemCode(body []byte) []byte {
	const field = `"code":"`
	i := bytes.Index(body, []byte(field))
	if i < 0 {
		return unknownCode
	}
	rest := body[i+len(field):]
	j := bytes.IndexByte(rest, '"')
	if j <= 0 || bytes.IndexByte(rest[:j], '\\') >= 0 {
		return unknownCode
	}
	return rest[:j]
}

// requestQuota is q of the "requests" policy of a RateLimit-Policy field:
// the account's request rate per second.
func requestQuota(field []byte) (uint32, bool) {
	return requestsParam(field, "q")
}

// requestsLeft is r and t of the "requests" item of a RateLimit field: the
// requests the serving shard's share has left and the whole seconds until
// it is full again.
func requestsLeft(field []byte) (left uint32, secs uint32, ok bool) {
	if left, ok = requestsParam(field, "r"); !ok {
		return 0, 0, false
	}
	secs, ok = requestsParam(field, "t")
	return left, secs, ok
}

// requestsParam reads one integer parameter of the "requests" item of a
// structured field list, in place.
func requestsParam(field []byte, name string) (uint32, bool) {
	for rest := field; len(rest) > 0; {
		var item []byte
		item, rest, _ = bytes.Cut(rest, []byte(","))
		params := bytes.TrimSpace(item)
		var key []byte
		key, params, _ = bytes.Cut(params, []byte(";"))
		if string(key) != `"requests"` {
			continue
		}
		for len(params) > 0 {
			var p []byte
			p, params, _ = bytes.Cut(params, []byte(";"))
			k, v, ok := bytes.Cut(p, []byte("="))
			if !ok || string(k) != name {
				continue
			}
			return parseUint32(v)
		}
	}
	return 0, false
}

// parseUint32 reads up to 10 decimal digits, in place.
func parseUint32(v []byte) (uint32, bool) {
	n, ok := decimal.Uint(v)
	return uint32(n), ok && len(v) <= 10 && n <= math.MaxUint32
}

// isTollgateHeader reports an X-Tollgate-* answer field.
func isTollgateHeader(name []byte) bool {
	const prefix = "x-tollgate-"
	return len(name) >= len(prefix) && bytes.EqualFold(name[:len(prefix)], []byte(prefix))
}
