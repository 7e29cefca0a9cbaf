package grpcapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"

	"github.com/tollgated/tollgated/h2"
	"github.com/tollgated/tollgated/httploop"
)

// recorder is an Answerer that keeps what each stream was answered.
type recorder struct {
	answers map[uint32]string // stream → "answer" or the failure's code
	msgs    int
	dead    map[uint32]bool // streams reset by their client
}

func (r *recorder) note(ref httploop.StreamRef, what string) bool {
	if _, twice := r.answers[ref.Stream()]; twice && what != "send" {
		panic(fmt.Sprintf("stream %d answered twice", ref.Stream()))
	}
	if what != "send" {
		r.answers[ref.Stream()] = what
	}
	return true
}

func (r *recorder) Answer(ref httploop.StreamRef, msg []byte) bool {
	r.msgs++
	return r.note(ref, "answer")
}
func (r *recorder) Fail(ref httploop.StreamRef, code uint32, msg string) bool {
	return r.note(ref, fmt.Sprint("code ", code))
}
func (r *recorder) Send(ref httploop.StreamRef, msg []byte) bool { return r.note(ref, "send") }
func (r *recorder) Finish(ref httploop.StreamRef, code uint32, msg string) bool {
	return r.note(ref, fmt.Sprint("finish ", code))
}
func (r *recorder) StreamLive(ref httploop.StreamRef) bool {
	_, answered := r.answers[ref.Stream()]
	return !answered && !r.dead[ref.Stream()]
}

// admitAll is a shard that admits every forward-auth call, as a shard
// admits one within its account's bucket.
func admitAll(req *fasthttp.Request, resp *fasthttp.Response, postpone func() uint64) {
	resp.Header.Set("RateLimit-Policy", `"requests";q=5;w=1`)
	resp.Header.Set("RateLimit", `"requests";r=4;t=1`)
	resp.Header.Set("X-Tollgate-Units", "1")
}

// unitService is a Service over rec and decide, with no loop: its accounts'
// keys are bound at once, and "acme"'s is known before the first call.
func unitService(t testing.TB, rec *recorder, decide Decider) *Service {
	sh, err := NewShared(Config{Domain: "tollgated", AccountEntry: "account", KeyHeader: "Authorization", Secret: make([]byte, 32),
		Binder: new(countingBinder), Ready: always, MaxHeld: 8, MaxHeaderBytes: testMaxHeaderBytes, AnswerTimeout: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	sh.keys.bound["acme"] = boundKey{key: sh.keys.keyOf("acme")}
	return sh.NewService(rec, decide, func() {})
}

func envoyRateLimit() []byte {
	b, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: "acme"}, {Key: "path", Value: "/v1/chat"}}}}})
	return b
}

func envoyCheck() []byte {
	h := map[string]string{":authority": "shop.example", ":method": "GET", ":path": "/v1/x", "authorization": "Bearer k",
		"user-agent": "curl/8", "accept": "*/*", "x-request-id": "5a1c", "x-forwarded-proto": "http"}
	b, _ := proto.Marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/v1/x", Headers: h}}}})
	return b
}

// TestADecisionAllocatesNothing: once its slots and buffers have grown, a
// call answered at once allocates nothing, for a rate limit and a check.
func TestADecisionAllocatesNothing(t *testing.T) {
	rec := &recorder{answers: map[uint32]string{}}
	s := unitService(t, rec, admitAll)
	for name, c := range map[string]struct {
		method int
		msg    []byte
	}{"ShouldRateLimit": {methodShouldRateLimit, envoyRateLimit()}, "Check": {methodCheck, envoyCheck()}} {
		x := &httploop.StreamCtx{Event: h2.Message, Request: &h2.Request{Method: c.method, Message: c.msg, EndStream: true}}
		run := func() {
			clear(rec.answers)
			s.Handle(x)
			if rec.answers[0] != "answer" {
				t.Fatalf("%s: %v", name, rec.answers)
			}
		}
		run()
		if n := testing.AllocsPerRun(200, run); n != 0 {
			t.Errorf("%s: %v allocations a call", name, n)
		}
	}
}

// fuzzShard answers a forward-auth call as the input's first byte says:
// admit, refuse, refuse the descriptor's path (400), not know the key
// (401), or postpone (completed by the target).
type fuzzShard struct {
	mode      byte
	tickets   []uint64
	decisions int
}

func (f *fuzzShard) decide(req *fasthttp.Request, resp *fasthttp.Response, postpone func() uint64) {
	f.decisions++
	// What reaches a shard is a request as decoded: every field an HTTP
	// token with a value no control byte ends early.
	for k, v := range req.Header.All() {
		if !isToken(k) || !fitsHeader(v) {
			panic(fmt.Sprintf("the shard got a field %q: %q", k, v))
		}
	}
	switch f.mode % 5 {
	case 0:
		admitAll(req, resp, postpone)
	case 1:
		resp.SetStatusCode(429)
		resp.Header.Set("Retry-After", "1")
		resp.SetBodyString(`{"code":"request-rate-limited"}`)
	case 2:
		resp.SetStatusCode(400)
		resp.SetBodyString(`{"code":"invalid-original-uri"}`)
	case 3:
		resp.SetStatusCode(401)
		resp.SetBodyString(`{"code":"unknown-principal"}`)
	case 4:
		f.tickets = append(f.tickets, postpone())
	}
}

// fuzzCall drives one call of method through a Service: whatever the
// message, the call is answered exactly once (a panic in recorder
// otherwise), postponed decisions included, and every slot is free after.
// With mode's top bit, the client resets its stream once the call is held:
// nothing more is decided for it, whether the shard's decision comes
// before the loop looks again (mode's next bit) or after.
func fuzzCall(t *testing.T, method int, mode byte, msg []byte) {
	rec := &recorder{answers: map[uint32]string{}, dead: map[uint32]bool{}}
	f := &fuzzShard{mode: mode}
	s := unitService(t, rec, f.decide)
	s.Handle(&httploop.StreamCtx{Event: h2.Message, Ref: httploop.DetachedStreamRef(1), Request: &h2.Request{Stream: 1, Method: method, Message: msg, EndStream: true}})
	if mode&0x80 != 0 && (len(f.tickets) > 0 || s.keys.waiting > 0) {
		rec.dead[1] = true
		for _, tk := range f.tickets {
			if s.Pending(tk) {
				t.Fatal("a decision is pending for a call whose client left")
			}
		}
		decided, owed := f.decisions, f.tickets
		f.tickets = nil
		if mode&0x40 != 0 {
			for _, tk := range owed {
				s.Complete(tk, func(r *fasthttp.Response) { admitAll(nil, r, nil) })
			}
			owed = nil
		}
		s.Tick(sweepEvery)
		for _, tk := range owed {
			if s.Complete(tk, func(r *fasthttp.Response) { admitAll(nil, r, nil) }) {
				t.Fatal("a decision was taken for a call whose client left")
			}
		}
		if f.decisions != decided || len(f.tickets) != 0 {
			t.Fatalf("%d more decisions for a call whose client left", f.decisions-decided)
		}
		if s.sh.stats.Abandoned.Load() != 1 {
			t.Fatalf("%d calls abandoned", s.sh.stats.Abandoned.Load())
		}
	}
	for i := 0; len(f.tickets) > 0; i++ {
		if i > 64 {
			t.Fatal("postponed decisions go on without end")
		}
		tk := f.tickets[0]
		f.tickets = f.tickets[1:]
		f.mode++ // the next decision answers otherwise
		decided := f.decisions
		if !s.Complete(tk, func(r *fasthttp.Response) { admitAll(nil, r, nil) }) {
			t.Fatal("a postponed decision's ticket was stale")
		}
		if f.decisions != decided {
			t.Fatal("Complete asked the shard for a decision: it must wait for CarryOn")
		}
		s.CarryOn()
	}
	// A descriptor held for its key (a 401 while the key is fresh) is
	// carried on by later ticks.
	for i := 0; s.keys.waiting > 0; i++ {
		if i > 5000 {
			t.Fatal("a descriptor waits for its key without end")
		}
		f.mode = 0
		time.Sleep(100 * time.Microsecond) // a binding runs on its own goroutine
		s.Tick(int64(i+1) * int64(retryEvery))
	}
	if len(rec.answers) != 1 {
		t.Fatalf("answers %v", rec.answers)
	}
	for _, sl := range s.slots.all {
		if sl.state != slotFree {
			t.Fatalf("a slot is left %v", sl.state)
		}
	}
	if s.slots.nheld != 0 {
		t.Fatalf("%d held", s.slots.nheld)
	}
}

func FuzzShouldRateLimitCall(f *testing.F) {
	f.Add(byte(0), envoyRateLimit())
	f.Add(byte(4), envoyRateLimit())
	f.Add(byte(0x81), envoyRateLimit()) // held (0x81 % 5 == 4), then its client leaves
	fresh, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: "fresh"}}}}})
	f.Add(byte(0x80), fresh) // waiting for its key to be bound, then its client leaves
	b, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "tollgated", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: "acme"}, {Key: "method", Value: "POST"}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: "ghost"}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: "acme"}, {Key: "path", Value: "/x"}}}}})
	for m := range byte(5) {
		f.Add(m, b)
	}
	f.Add(byte(0xc2), b) // held (0xc2 % 5 == 4), its client leaves, its decision comes: no next descriptor
	f.Add(byte(1), []byte(strings.Repeat("\x12\x00", 20)))
	f.Fuzz(func(t *testing.T, mode byte, msg []byte) { fuzzCall(t, methodShouldRateLimit, mode, msg) })
}

func FuzzCheckCall(f *testing.F) {
	for m := range byte(5) {
		f.Add(m, envoyCheck())
	}
	f.Add(byte(0), []byte{0x0a, 0x02, 0x22, 0x00})
	f.Add(byte(0x81), envoyCheck()) // held, then its client leaves
	f.Fuzz(func(t *testing.T, mode byte, msg []byte) { fuzzCall(t, methodCheck, mode, msg) })
}

// TestEveryStreamGetsItsEnd: a stream that ends without a message is
// refused; one whose message was answered gets nothing more; a reflection
// stream is finished when its client ends it, and one its client reset
// is ended by the next look, so the connection stops counting it.
func TestEveryStreamGetsItsEnd(t *testing.T) {
	rec := &recorder{answers: map[uint32]string{}}
	s := unitService(t, rec, admitAll)
	half := func(stream uint32, method int) {
		s.Handle(&httploop.StreamCtx{Event: h2.HalfClosed, Ref: httploop.DetachedStreamRef(stream), Request: &h2.Request{Stream: stream, Method: method, EndStream: true}})
	}
	half(1, methodShouldRateLimit)
	half(2, methodCheck)
	half(3, methodHealthWatch)
	for stream := uint32(1); stream <= 3; stream++ {
		if rec.answers[stream] != "code 3" {
			t.Fatalf("stream %d without a message: %q, want INVALID_ARGUMENT", stream, rec.answers[stream])
		}
	}
	list, _ := proto.Marshal(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	s.Handle(&httploop.StreamCtx{Event: h2.Message, Ref: httploop.DetachedStreamRef(5), Request: &h2.Request{Stream: 5, Method: methodReflectionV1, Message: list}})
	if _, ended := rec.answers[5]; ended || s.watches.len() != 1 {
		t.Fatalf("a reflection stream ended after one answer: %v", rec.answers)
	}
	half(5, methodReflectionV1)
	if rec.answers[5] != "finish 0" || s.watches.len() != 0 {
		t.Fatalf("a reflection stream its client ended: %q", rec.answers[5])
	}
	rec.dead = map[uint32]bool{7: true}
	s.Handle(&httploop.StreamCtx{Event: h2.Message, Ref: httploop.DetachedStreamRef(7), Request: &h2.Request{Stream: 7, Method: methodReflectionV1, Message: list}})
	s.Tick(int64(time.Second))
	if rec.answers[7] != "finish 0" || s.watches.len() != 0 {
		t.Fatalf("a reflection stream its client reset: %q", rec.answers[7])
	}
}

// TestHeaderNamesAreCanonical: the names the forward-auth request is built
// with are set without normalising, so they must already be canonical.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, name := range [][]byte{hdrOriginalMeth, hdrOriginalURI, hdrHitsAddend} {
		if got := fasthttp.AppendNormalizedHeaderKeyBytes(nil, name); string(got) != string(name) {
			t.Errorf("%q is %q in canonical form", name, got)
		}
	}
}
