package grpcapi

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// What a shard's forward-auth answer carries, as read here.
const (
	hdrReason          = "X-Tollgate-Reason" // the refusal's problem code, for the gateway's client
	hdrRateLimit       = "RateLimit"
	hdrRateLimitPolicy = "RateLimit-Policy"
)

// problemCode is the code of a problem document, or "unknown" when the
// body is not one (a transport's own answer always is).
func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &p) != nil || p.Code == "" {
		return "unknown"
	}
	return p.Code
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
			n, err := strconv.ParseUint(string(v), 10, 32)
			return uint32(n), err == nil
		}
	}
	return 0, false
}

// tollgateHeaders are the X-Tollgate-* answer fields a shard sets, by
// their canonical names: reading one back reuses the name.
var tollgateHeaders = [...]string{"X-Tollgate-Account", "X-Tollgate-Request-Id", "X-Tollgate-Units", "X-Tollgate-Reservation"}

// headerName is name as a string, without allocating for a field a shard
// sets.
func headerName(name []byte) string {
	for _, h := range tollgateHeaders {
		if string(name) == h {
			return h
		}
	}
	return string(name)
}

func secondsDuration(s uint32) time.Duration {
	return time.Duration(min(uint64(s), math.MaxInt64/uint64(time.Second))) * time.Second
}

// isTollgateHeader reports an X-Tollgate-* answer field.
func isTollgateHeader(name string) bool {
	return len(name) >= len("x-tollgate-") && strings.EqualFold(name[:len("x-tollgate-")], "x-tollgate-")
}
