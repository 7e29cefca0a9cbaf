package grpcapi

import (
	"fmt"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgated/tollgated/grpcmsg"
	"github.com/tollgated/tollgated/httploop"
)

// grpc.health.v1 is read from the node, as /readyz is: SERVING while the
// data plane serves and its usage spool takes records, NOT_SERVING while
// it starts, drains, or cannot make usage durable. It is read when asked,
// so nothing runs while nobody asks; a Watch looks again every watchEvery
// and sends each change. Watches end when the loop drains, after
// NOT_SERVING: a long-lived stream must not hold a graceful stop until its
// deadline.

// Health statuses (grpc.health.v1.HealthCheckResponse.ServingStatus).
const (
	healthServing        = 1
	healthNotServing     = 2
	healthServiceUnknown = 3
)

const (
	// watchEvery is a little under the loop's default idle tick, so each
	// idle wake-up looks: a change is sent within about a second, and a
	// daemon watched by a gateway still sleeps.
	watchEvery = int64(900 * time.Millisecond)
	// maxWatches bounds the streams one shard keeps open (watches and
	// reflection streams); one more is refused RESOURCE_EXHAUSTED.
	maxWatches = 1024 // with the reflection streams
)

var healthServices = map[string]bool{"": true, rlsv3.RateLimitService_ServiceDesc.ServiceName: true,
	authv3.Authorization_ServiceDesc.ServiceName: true}

func (s *Service) healthCheck(ref httploop.StreamRef, msg []byte) {
	svc, err := grpcmsg.DecodeHealthCheck(msg)
	switch {
	case err != nil:
		s.out.Fail(ref, codeInvalidArgument, "tollgated: "+err.Error())
	case !healthServices[string(svc)]:
		s.out.Fail(ref, codeNotFound, fmt.Sprintf("tollgated: no service %q", svc))
	default:
		s.buf = grpcmsg.AppendHealthCheckResponse(s.buf[:0], s.watches.status())
		s.out.Answer(ref, s.buf)
	}
}

// watch starts a Watch: the status now, then each change.
func (s *Service) watch(ref httploop.StreamRef, msg []byte) {
	svc, err := grpcmsg.DecodeHealthCheck(msg)
	switch {
	case err != nil:
		s.out.Fail(ref, codeInvalidArgument, "tollgated: "+err.Error())
	case !healthServices[string(svc)]:
		s.lastStatus(ref, healthServiceUnknown)
	case s.watches.ending:
		s.lastStatus(ref, healthNotServing)
	case len(s.watches.all) >= maxWatches:
		s.out.Fail(ref, codeResourceExhausted, "tollgated: the shard keeps as many open streams as it may")
	default:
		st := s.watches.status()
		s.buf = grpcmsg.AppendHealthCheckResponse(s.buf[:0], st)
		s.out.Send(ref, s.buf)
		s.watches.all = append(s.watches.all, watch{ref: ref, last: st})
	}
}

// lastStatus sends a watch one status and ends it.
func (s *Service) lastStatus(ref httploop.StreamRef, st int32) {
	s.buf = grpcmsg.AppendHealthCheckResponse(s.buf[:0], st)
	s.out.Send(ref, s.buf)
	s.out.Finish(ref, codeOK, "")
}

// watches are the streams a shard keeps open: health watches, and
// reflection streams until their client ends them. A stream its client
// reset is still owed its end by the loop's HTTP/2 machine, which counts
// it against the connection's streams until then: tick ends those.
type watches struct {
	ready  func() bool
	all    []watch
	due    int64 // the next look at the status
	buf    []byte
	ending bool // the loop drains: no more are kept
}

type watch struct {
	ref        httploop.StreamRef
	last       int32 // the status it was last sent
	reflection bool  // a reflection stream, not a watch
}

func (w *watches) init(ready func() bool) { w.ready = ready }

func (w *watches) len() int { return len(w.all) }

func (w *watches) status() int32 {
	if w.ready() {
		return healthServing
	}
	return healthNotServing
}

// tick sends each watch the status when it changed, and forgets watches
// whose stream has ended.
func (w *watches) tick(out Answerer, now int64) {
	if len(w.all) == 0 || now < w.due {
		return
	}
	w.due = now + watchEvery
	st := w.status()
	kept := w.all[:0]
	for _, x := range w.all {
		if !out.StreamLive(x.ref) {
			out.Finish(x.ref, codeOK, "") // writes nothing: releases it
			continue
		}
		if !x.reflection && x.last != st {
			w.buf = grpcmsg.AppendHealthCheckResponse(w.buf[:0], st)
			out.Send(x.ref, w.buf)
			x.last = st
		}
		kept = append(kept, x)
	}
	clear(w.all[len(kept):])
	w.all = kept
}

// end sends every watch NOT_SERVING, unless it was, and ends it.
func (w *watches) end(out Answerer) {
	for _, x := range w.all {
		if !x.reflection && x.last != healthNotServing {
			w.buf = grpcmsg.AppendHealthCheckResponse(w.buf[:0], healthNotServing)
			out.Send(x.ref, w.buf)
		}
		out.Finish(x.ref, codeOK, "")
	}
	clear(w.all)
	w.all = w.all[:0]
	w.ending = true
}

// reflection answers one message of a reflection stream, which stays open
// until its client ends it.
func (s *Service) reflection(ref httploop.StreamRef, msg []byte) {
	w := &s.watches
	known := w.find(ref) >= 0
	if !known && len(w.all) >= maxWatches {
		s.out.Fail(ref, codeResourceExhausted, "tollgated: the shard keeps as many open streams as it may")
		return
	}
	b, err := s.sh.reflect.answer(msg)
	if err != nil {
		if i := w.find(ref); i >= 0 {
			w.remove(i)
		}
		s.out.Fail(ref, codeInvalidArgument, err.Error())
		return
	}
	s.out.Send(ref, b)
	if !known {
		w.all = append(w.all, watch{ref: ref, reflection: true})
	}
}

// endReflection ends a reflection stream its client has ended.
func (s *Service) endReflection(ref httploop.StreamRef) {
	if i := s.watches.find(ref); i >= 0 {
		s.watches.remove(i)
	}
	s.out.Finish(ref, codeOK, "")
}

func (w *watches) find(ref httploop.StreamRef) int {
	for i, x := range w.all {
		if x.ref == ref {
			return i
		}
	}
	return -1
}

func (w *watches) remove(i int) {
	last := len(w.all) - 1
	w.all[i] = w.all[last]
	w.all[last] = watch{}
	w.all = w.all[:last]
}
