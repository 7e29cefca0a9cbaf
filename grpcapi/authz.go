package grpcapi

import (
	"bytes"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/grpcmsg"
	"github.com/tollgated/tollgated/httploop"
)

// Bounds of a CheckRequest, beyond the message size and the decoder's
// (grpcmsg.MaxHeaders headers).
const (
	maxURILen     = 4096 // the shard refuses longer ones the same way
	maxHeaderName = 256
)

// droppedHeaders are headers of the original request that are not passed
// to the shard: the exchange's own (the original method and URI come from
// Envoy's attributes, not from what a client may have sent), and those
// that describe a connection or a body that is not there. Lower case, as
// HTTP/2 names are; compared without regard to case.
var droppedHeaders = [...]string{"x-original-method", "x-original-uri", "x-forwarded-method", "x-forwarded-uri",
	"host", "content-length", "transfer-encoding", "connection", "keep-alive",
	"te", "trailer", "upgrade", "proxy-connection", "expect"}

func dropped(name []byte) bool {
	if len(name) > 0 && name[0] == ':' {
		return true
	}
	for _, d := range droppedHeaders {
		if len(name) == len(d) && bytes.EqualFold(name, []byte(d)) {
			return true
		}
	}
	return false
}

// check serves ext_authz Check: /v1/authz, the same shard decision, its
// headers and status carried in Envoy's terms.
func (s *Service) check(ref httploop.StreamRef, msg []byte) {
	ck := &s.ck
	if err := ck.Decode(msg); err != nil {
		s.out.Fail(ref, codeInvalidArgument, "tollgated: "+err.Error())
		return
	}
	if err := checkValid(ck); err != nil {
		s.out.Fail(ref, codeInvalidArgument, "tollgated: "+err.Error())
		return
	}
	if headBytes(ck) > s.sh.cfg.MaxHeaderBytes {
		s.buf = grpcmsg.AppendCheckResponse(s.buf[:0], headerTooLarge())
		s.out.Answer(ref, s.buf)
		return
	}
	i, sl := s.slots.acquire(ref, methodCheck)
	if sl == nil {
		s.busy(ref)
		return
	}
	s.forwardCheck(ck)
	if s.decideIn(i, sl) {
		return // the answer needs only the decision, which the slot will hold
	}
	s.answerCheck(i, sl)
}

// checkValid reports what is wrong with a CheckRequest's request.
func checkValid(ck *grpcmsg.CheckRequest) error {
	switch {
	case !ck.HasHTTP:
		return fmt.Errorf("attributes.request.http is required")
	case !isToken(ck.Method) || len(ck.Method) > maxMethodLen:
		return fmt.Errorf("attributes.request.http.method: an HTTP method of 1 to %d bytes", maxMethodLen)
	case len(ck.Path) == 0 || len(ck.Path) > maxURILen || !fitsHeader(ck.Path):
		return fmt.Errorf("attributes.request.http.path: 1 to %d bytes without control bytes", maxURILen)
	}
	for _, h := range ck.Headers {
		if dropped(h.Key) {
			continue
		}
		if !isToken(h.Key) || len(h.Key) > maxHeaderName {
			return fmt.Errorf("header %.64q: a header name is an HTTP token of at most %d bytes", h.Key, maxHeaderName)
		}
		if !fitsHeader(h.Value) {
			return fmt.Errorf("header %s: a value holds no control byte", h.Key)
		}
	}
	return nil
}

// forwardCheck writes ck as a forward-auth call into s.req: its headers,
// but those dropped, each read as an HTTP parser reads a field (without
// the spaces and tabs around its value, RFC 9110 §5.5), and its method
// and path in the X-Original-* headers.
func (s *Service) forwardCheck(ck *grpcmsg.CheckRequest) {
	req := &s.req
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURIBytes(pathAuthz)
	for _, h := range ck.Headers {
		if !dropped(h.Key) {
			req.Header.AddBytesKV(h.Key, bytes.Trim(h.Value, " \t"))
		}
	}
	req.Header.SetCanonical(hdrOriginalMeth, ck.Method)
	req.Header.SetCanonical(hdrOriginalURI, ck.Path)
}

// headBytes is the size of the checked request's request line and headers
// as an HTTP/1.1 head: what the shards bound when a gateway forwards the
// request itself. Every header counts, including those not passed on
// (Host, …), as they count on the wire; the HTTP/2 pseudo-headers Envoy
// adds (:method, :path, :scheme, :authority) are the request line's, so
// they count only as the Host header :authority becomes when there is
// none.
func headBytes(ck *grpcmsg.CheckRequest) int {
	n := len(ck.Method) + 1 + len(ck.Path) + len(" HTTP/1.1\r\n") + len("\r\n")
	host, authority := false, 0
	for _, h := range ck.Headers {
		switch {
		case string(h.Key) == ":authority":
			authority = len(h.Value)
		case len(h.Key) == 0 || h.Key[0] != ':':
			n += len(h.Key) + len(": ") + len(h.Value) + len("\r\n")
			host = host || bytes.EqualFold(h.Key, []byte("host"))
		}
	}
	if !host && authority > 0 {
		n += len("host: ") + authority + len("\r\n")
	}
	return n
}

// answerCheck answers slot i's check from the shard's decision in the
// slot, and frees the slot.
func (s *Service) answerCheck(i int, sl *slot) {
	s.buf = grpcmsg.AppendCheckResponse(s.buf[:0], s.checkResponse(&sl.resp))
	s.out.Answer(sl.ref, s.buf)
	s.slots.release(i)
}

// checkResponse mirrors a shard's forward-auth answer: 200 allows, with the
// X-Tollgate-* and RateLimit fields for the upstream request (replacing
// any a client sent); anything else denies with the shard's status,
// Retry-After, RateLimit fields and problem document.
func (s *Service) checkResponse(resp *fasthttp.Response) *grpcmsg.CheckResponse {
	r := &s.checkAnswer
	r.Reset()
	code := resp.StatusCode()
	if code == fasthttp.StatusOK {
		resp.Header.VisitAll(func(k, v []byte) {
			if upstreamHeader(k) {
				r.AddHeader(k, v)
			}
		})
		return r
	}
	r.Denied, r.Code, r.Message, r.HTTPStatus, r.Body = true, codePermissionDenied, problemCode(resp.Body()), int32(code), resp.Body()
	if code == fasthttp.StatusUnauthorized {
		r.Code = codeUnauthenticated
	}
	for _, name := range clientHeaders {
		if v := resp.Header.PeekBytes(name); len(v) > 0 {
			r.AddHeader(name, v)
		}
	}
	return r
}

// upstreamHeader reports the answer headers an allowed request carries on
// to the service (as allowed_upstream_headers does in the HTTP setup).
func upstreamHeader(name []byte) bool {
	return isTollgateHeader(name) || bytes.EqualFold(name, []byte(hdrRateLimit)) || bytes.EqualFold(name, []byte(hdrRateLimitPolicy))
}

// clientHeaders are the refusal headers the client is answered with.
var clientHeaders = [][]byte{[]byte("Content-Type"), []byte("Retry-After"), []byte(hdrRateLimit), []byte(hdrRateLimitPolicy), []byte("WWW-Authenticate")}

// tooLargeBody is the shards' problem document for a head over the bound.
const tooLargeBody = `{"type":"about:blank","title":"Request Header Fields Too Large","status":431,"code":"header-too-large"}`

var tooLarge = func() *grpcmsg.CheckResponse {
	r := new(grpcmsg.CheckResponse)
	r.Denied, r.Code, r.Message, r.HTTPStatus, r.Body = true, codePermissionDenied, []byte("header-too-large"), fasthttp.StatusRequestHeaderFieldsTooLarge, []byte(tooLargeBody)
	r.AddHeader([]byte("Content-Type"), []byte("application/problem+json"))
	return r
}()

// headerTooLarge denies a check whose request head is over the bound, as
// a shard answers such a request: 431 header-too-large. Nothing is
// decided or billed.
func headerTooLarge() *grpcmsg.CheckResponse { return tooLarge }
