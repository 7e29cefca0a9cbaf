package shard

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/rs/zerolog"
)

// A panic reached anyway.
//
// The decoders (decode.go) interpret hostile bytes, so they are where a
// missed case is likeliest. While one runs, it reads the request and
// writes only the shard's scratch — the parser, the field path, the number
// text, the work lines — which the next request overwrites; the usage slot
// and acknowledgement room a staged request claimed before its body are
// handed back by the same refusal path as a 400. Nothing of the engine, the
// rings or the credential cache changes inside a decoder. So a panic there
// is recovered: the request is answered 500 internal, counted
// (tollgated_internal_errors_total), and the first one on each shard is
// logged with its stack (later ones only count: a request that can make
// the shard panic can make it log for every request).
//
// Nowhere else is a panic recovered. Inside authentication, the engine,
// the rings or the encoding of an answer it may leave state half changed —
// a lease debited and no reservation, a usage slot claimed twice — and
// serving on from such state could bill wrongly; the process crashes, and
// restarts from the ledger and the spool.

const detailInternal = "the request could not be decoded; the server logged why"

// recoverDecode is deferred by every decoder: it turns a panic into the
// decoder's refusal.
func (s *Shard) recoverDecode(p *fieldProblem) {
	v := recover()
	if v == nil {
		return
	}
	s.internalErrors++
	if s.internalErrors == 1 {
		s.logPanic(v, debug.Stack())
	}
	s.atTop()
	*p = fieldProblem{problemInternal, detailInternal}
}

func (s *Shard) logPanic(v any, stack []byte) {
	w := s.cfg.PanicLog
	if w == nil {
		w = os.Stderr
	}
	log := zerolog.New(w).With().Timestamp().Logger()
	log.Error().Uint16("shard", s.cfg.ID).Str("panic", fmt.Sprint(v)).Bytes("stack", stack).
		Msg("recovered a panic while decoding a request: answered 500 internal; " +
			"later ones on this shard are only counted (tollgated_internal_errors_total)")
}

// faultIn runs the test hook that makes a decoder panic, if one is set.
func (s *Shard) faultIn() {
	if s.testDecodeFault != nil {
		s.testDecodeFault()
	}
}
