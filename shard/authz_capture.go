package shard

import (
	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

// Who ends a reservation.
//
// A reservation from /v1/admit is the customer's: its key commits,
// finishes or cancels it. A capture from /v1/authz is not: the customer's
// request passed the gateway on the strength of a hold, and if the
// customer's key could finish it, the customer could report 0 units for
// work the service did. The service behind the gateway ends it instead,
// with a platform token (POST /v1/platform-tokens): the credential of the
// operator's own software, which the customer never holds, and which
// already reports usage for any account (POST /v1/usage). Each kind answers
// only to its own: a capture's id presented with the customer's key, or an
// /v1/admit reservation's with a platform token, is an unknown reservation
// (404), as is an id that was never issued (ops.go: ids are unguessable).

// reservationCaller resolves the bearer credential of a commit, finish or
// cancel: a customer key or a platform token (mayEnd decides which may end
// what).
func (s *Shard) reservationCaller(req *fasthttp.Request, now int64) (core.Principal, bool) {
	key, ok := credential.BearerToken(req.Header.Peek(fasthttp.HeaderAuthorization))
	if !ok {
		return core.Principal{}, false
	}
	if p, ok := s.keyPrincipal(key, now); ok {
		return p, true
	}
	return s.platformPrincipal(key, now)
}

// mayEnd reports whether principal p may operate on live reservation r:
// a capture's caller must hold a platform token, any other's must be the
// principal that admitted it.
func (s *Shard) mayEnd(r core.Reservation, p core.Principal) bool {
	owner, ok := s.engine.PrincipalOf(r)
	if !ok {
		return false
	}
	if s.engine.CaptureOf(r) != core.CaptureNone {
		_, service := s.platform[p]
		return service
	}
	return owner == p
}
