package grpcapi

import (
	"testing"

	"github.com/tollgated/tollgated/h2"
	"github.com/tollgated/tollgated/httploop"
)

// BenchmarkShouldRateLimit is the service's own work for one call, on the
// shard's thread: decode, the account's key, the forward-auth request, the
// answer read back and encoded. The shard's decision (admitAll here) and
// the HTTP/2 framing are not in it.
func BenchmarkShouldRateLimit(b *testing.B) {
	benchCall(b, methodShouldRateLimit, envoyRateLimit())
}

// BenchmarkCheck is BenchmarkShouldRateLimit for an ext_authz Check of a
// request with eight headers.
func BenchmarkCheck(b *testing.B) { benchCall(b, methodCheck, envoyCheck()) }

func benchCall(b *testing.B, method int, msg []byte) {
	rec := &recorder{answers: map[uint32]string{}}
	s := unitService(b, rec, admitAll)
	x := &httploop.StreamCtx{Event: h2.Message, Request: &h2.Request{Method: method, Message: msg, EndStream: true}}
	b.ReportAllocs()
	for b.Loop() {
		clear(rec.answers)
		s.Handle(x)
	}
}
