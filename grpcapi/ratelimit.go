package grpcapi

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/grpcmsg"
	"github.com/tollgated/tollgated/httploop"
)

// Bounds of a RateLimitRequest, beyond the message size and the decoder's
// (grpcmsg.MaxDescriptors descriptors, grpcmsg.MaxEntries entries each).
const (
	maxEntryKey   = 64
	maxEntryValue = 4096
	maxHits       = 1_000_000_000 // the largest count a route may name
	maxAccountLen = 64
	maxMethodLen  = 24
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

// descriptorCall is one descriptor as the shard is asked about it: the
// account (whose own key the call carries), the request it stands for,
// and the count.
type descriptorCall struct {
	account, method, uri []byte
	hits                 uint64
}

var (
	defaultMethod = []byte(fasthttp.MethodGet)
	defaultURI    = []byte("/")
)

// check reads a request as a whole into calls, one per descriptor, or
// reports what is wrong with it, before any of its descriptors is decided:
// a request refused is refused whole, nothing billed.
func (r rateLimitRules) check(req *grpcmsg.RateLimitRequest, calls *[grpcmsg.MaxDescriptors]descriptorCall) error {
	if string(req.Domain) != r.domain {
		return fmt.Errorf("domain %q is not served here (want %q)", req.Domain, r.domain)
	}
	if len(req.Descriptors) == 0 {
		return errors.New("no descriptors: want 1 to 16")
	}
	for i := range req.Descriptors {
		c, err := r.descriptor(&req.Descriptors[i], req.HitsAddend)
		if err != nil {
			return fmt.Errorf("descriptors[%d]: %w", i, err)
		}
		calls[i] = c
	}
	return nil
}

// descriptor reads d as a call. Entries other than the account, method
// and path are ignored: a gateway sends what its actions produce.
func (r rateLimitRules) descriptor(d *grpcmsg.Descriptor, hits uint32) (descriptorCall, error) {
	c := descriptorCall{method: defaultMethod, uri: defaultURI, hits: uint64(hits)}
	switch {
	case d.HasLimit:
		return c, errors.New("a limit override is not accepted: limits are the account's policy")
	case d.IsNegativeHits:
		return c, errors.New("negative hits are not accepted: admitted work is billed, never refunded here")
	}
	if d.HasHitsAddend {
		c.hits = d.HitsAddend
	}
	if c.hits == 0 {
		c.hits = 1 // unset: one hit, as Envoy means it
	}
	if c.hits > maxHits {
		return c, fmt.Errorf("hits_addend %d: want at most %d", c.hits, maxHits)
	}
	var seenMethod, seenPath bool
	for _, e := range d.Entries {
		k, v := e.Key, e.Value
		if len(k) == 0 || len(k) > maxEntryKey || len(v) > maxEntryValue {
			return c, fmt.Errorf("entry %.64q: keys are 1 to %d bytes, values at most %d", k, maxEntryKey, maxEntryValue)
		}
		switch string(k) {
		case r.accountEntry:
			if c.account != nil {
				return c, fmt.Errorf("entry %q given twice", k)
			}
			if !validAccount(v) {
				return c, fmt.Errorf("entry %q: an account id is 1 to %d bytes of [a-z0-9._-], starting with a letter or digit", k, maxAccountLen)
			}
			c.account = v
		case entryMethod:
			if seenMethod || !isToken(v) || len(v) > maxMethodLen {
				return c, fmt.Errorf("entry %q: once, an HTTP method of at most %d bytes", k, maxMethodLen)
			}
			seenMethod, c.method = true, v
		case entryPath:
			if seenPath || len(v) == 0 || v[0] != '/' || !fitsHeader(v) {
				return c, fmt.Errorf("entry %q: once, a request target starting with / and without control bytes", k)
			}
			seenPath, c.uri = true, v
		}
	}
	if c.account == nil {
		return c, fmt.Errorf("no %q entry names the account", r.accountEntry)
	}
	return c, nil
}

// rateLimit serves ShouldRateLimit: each descriptor in order, each as one
// forward-auth call for its account; the answer is OVER_LIMIT when any
// descriptor is. A descriptor admitted is billed even if a later one is
// over its limit, as each descriptor is its own limit.
func (s *Service) rateLimit(ref httploop.StreamRef, msg []byte) {
	if err := s.rl.Decode(msg); err != nil {
		s.out.Fail(ref, codeInvalidArgument, "tollgated: "+err.Error())
		return
	}
	s.rlMsg = msg
	if err := s.sh.rules.check(&s.rl, &s.calls); err != nil {
		s.out.Fail(ref, codeInvalidArgument, "tollgated: "+err.Error())
		return
	}
	i, sl := s.slots.acquire(ref, methodShouldRateLimit)
	if sl == nil {
		s.busy(ref)
		return
	}
	s.runDescriptors(i, sl, msg)
}

// runDescriptors decides slot i's descriptors from sl.next on, s.calls
// holding them as read from msg, until one is held (postponed, or waiting
// for its key) or all are decided and the call is answered.
func (s *Service) runDescriptors(i int, sl *slot, msg []byte) {
	for sl.next < len(s.rl.Descriptors) {
		d := &s.calls[sl.next]
		key, st := s.keys.of(d.account, s.sh.bearer)
		switch st {
		case keyUnknown:
			s.appendUnknownAccount(sl)
			sl.next++
			continue
		case keyFailed:
			s.finish(i, sl, codeUnavailable, "tollgated: the account's key could not be published to the shards")
			return
		case keyWaiting:
			s.keep(sl, msg)
			sl.state, sl.since = slotKey, s.now
			s.keys.wait(i, d.account)
			return
		}
		s.forwardDescriptor(d, key)
		if s.decideIn(i, sl) {
			s.keep(sl, msg)
			return
		}
		if !s.descriptorDone(i, sl) {
			return
		}
	}
	f := &s.frag
	f.Reset()
	f.OverallCode = overallCode(sl.over)
	sl.answer = grpcmsg.AppendRateLimitResponse(sl.answer, f)
	s.out.Answer(sl.ref, sl.answer)
	s.slots.release(i)
}

// keep copies the request into its slot, which outlives the stream's
// input, once.
func (s *Service) keep(sl *slot, msg []byte) {
	if len(sl.msg) == 0 {
		sl.msg = append(sl.msg[:0], msg...)
	}
}

// finish ends slot i's call with a status and no answer message.
func (s *Service) finish(i int, sl *slot, code uint32, msg string) {
	s.out.Fail(sl.ref, code, msg)
	s.slots.release(i)
}

func overallCode(over bool) int32 {
	if over {
		return grpcmsg.CodeOverLimit
	}
	return grpcmsg.CodeOK
}

// forwardDescriptor writes d as a forward-auth call into s.req, in the
// shape nginx uses: the method and URI in X-Original-* headers, the count
// in Hits-Addend, the account's key in the key header.
func (s *Service) forwardDescriptor(d *descriptorCall, key []byte) {
	req := &s.req
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURIBytes(pathAuthz)
	req.Header.SetCanonical(hdrOriginalMeth, d.method)
	req.Header.SetCanonical(hdrOriginalURI, d.uri)
	s.buf = strconv.AppendUint(s.buf[:0], d.hits, 10)
	req.Header.SetCanonical(hdrHitsAddend, s.buf)
	req.Header.SetCanonical(s.sh.keyHeader, key)
}

// descriptorDone reads the shard's answer to slot i's current descriptor
// into the answer, and reports whether the call goes on with the next.
// A key the shard does not know is waited for while it is fresh (the
// shard may not have applied its binding yet); after that the account is
// gone.
func (s *Service) descriptorDone(i int, sl *slot) bool {
	resp := &sl.resp
	switch resp.StatusCode() {
	case fasthttp.StatusUnauthorized:
		d := &s.calls[sl.next]
		if s.keys.fresh(d.account) {
			s.keep(sl, s.rlMsg)
			sl.state, sl.since = slotKey, s.now
			s.keys.retry(i, d.account, s.now)
			return false
		}
		s.keys.forget(d.account)
		s.appendUnknownAccount(sl)
	case fasthttp.StatusBadRequest:
		s.finish(i, sl, codeInvalidArgument, "tollgated: the descriptor's method or path is refused: "+string(problemCode(resp.Body())))
		return false
	default:
		s.appendStatus(sl, resp)
	}
	sl.next++
	return true
}

// appendStatus appends a descriptor's status, read from the shard's
// forward-auth answer, to the slot's answer: 200 is OK, with the answer's
// X-Tollgate-* fields (the account, the request id, the units billed) for
// the upstream request; a refusal (an admission refusal, or a route the
// policy does not admit) is OVER_LIMIT with its problem code in
// X-Tollgate-Reason and the answer's Retry-After and RateLimit fields, the
// first refusal's for the client.
//
// The answer is built as a run of RateLimitResponse fragments, one per
// descriptor, and an overall code last: protobuf reads concatenated
// messages as one, repeated fields in order and the last overall code.
func (s *Service) appendStatus(sl *slot, resp *fasthttp.Response) {
	f := &s.frag
	f.Reset()
	st := f.AddStatus()
	st.Code = grpcmsg.CodeOK
	if q, ok := requestQuota(resp.Header.Peek(hdrRateLimitPolicy)); ok {
		st.HasCurrentLimit = true
		st.CurrentLimit = grpcmsg.RateLimit{Name: limitName, RequestsPerUnit: q, Unit: grpcmsg.UnitSecond}
	}
	if left, secs, ok := requestsLeft(resp.Header.Peek(hdrRateLimit)); ok {
		st.LimitRemaining = left
		st.HasDurationUntilReset, st.DurationUntilReset = true, time.Duration(secs)*time.Second
	}
	if resp.StatusCode() == fasthttp.StatusOK {
		resp.Header.VisitAll(func(k, v []byte) {
			if isTollgateHeader(k) {
				f.AddRequestHeader(k, v)
			}
		})
	} else {
		st.Code = grpcmsg.CodeOverLimit
		if !sl.over {
			f.AddResponseHeader(hdrReasonBytes, problemCode(resp.Body()))
			for _, name := range refusalHeaders {
				if v := resp.Header.PeekBytes(name); len(v) > 0 {
					f.AddResponseHeader(name, v)
				}
			}
		}
		sl.over = true
	}
	sl.answer = grpcmsg.AppendRateLimitResponse(sl.answer, f)
}

// appendUnknownAccount appends the status of a descriptor naming an account
// no shard knows: over the limit, so a gateway that fails open on errors
// still refuses work nobody can be billed for.
func (s *Service) appendUnknownAccount(sl *slot) {
	f := &s.frag
	f.Reset()
	f.AddStatus().Code = grpcmsg.CodeOverLimit
	if !sl.over {
		f.AddResponseHeader(hdrReasonBytes, unknownAccount)
	}
	sl.over = true
	sl.answer = grpcmsg.AppendRateLimitResponse(sl.answer, f)
}

var (
	limitName      = []byte("requests")
	unknownAccount = []byte("unknown-account")
	hdrReasonBytes = []byte(hdrReason)
	refusalHeaders = [][]byte{[]byte("Retry-After"), []byte(hdrRateLimit), []byte(hdrRateLimitPolicy)}
)

// validAccount is the admin API's account id rule.
func validAccount(s []byte) bool {
	if len(s) == 0 || len(s) > maxAccountLen {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}
