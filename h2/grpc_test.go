package h2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawCodec passes messages as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = bytes.Clone(data)
	return nil
}
func (rawCodec) Name() string { return "raw" }

const (
	mUnary   = "/test.Echo/Unary"
	mHold    = "/test.Echo/Hold"
	mFail    = "/test.Echo/Fail"
	mStream  = "/test.Echo/Stream"
	mTimeout = "/test.Echo/Timeout"
	mCollect = "/test.Echo/Collect"
	mHealth  = "/grpc.health.v1.Health/Check"
)

var grpcMethods = []string{mUnary, mHold, mFail, mStream, mTimeout, mCollect, mHealth}

func grpcConfig() *Config {
	return &Config{
		Methods:            grpcMethods,
		MaxStreams:         100,
		MaxMessageBytes:    2 << 20,
		MaxHeaderListBytes: 16 << 10,
	}
}

var servingBytes = func() []byte {
	b, err := proto.Marshal(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
	if err != nil {
		panic(err)
	}
	return b
}()

// echoHandler answers each method as its name says; Hold keeps the call
// for the test to answer; Collect gathers a client stream's messages.
func echoHandler(l *testLoop, ev Event, r *Request) {
	if r.Method < 0 {
		l.out = l.c.Fail(l.out, r.Stream, uint32(codes.Unimplemented), "unknown method")
		return
	}
	m := grpcMethods[r.Method]
	if ev == HalfClosed && m != mCollect {
		l.out = l.c.Fail(l.out, r.Stream, uint32(codes.Internal), "no request message")
		return
	}
	switch m {
	case mUnary:
		l.out = l.c.Answer(l.out, r.Stream, r.Message)
	case mHold:
		l.held[r.Stream] = bytes.Clone(r.Message)
	case mFail:
		l.out = l.c.Fail(l.out, r.Stream, uint32(r.Message[0]), string(r.Message[1:]))
	case mStream:
		for i := range 3 {
			l.out = l.c.Send(l.out, r.Stream, fmt.Appendf(nil, "%s-%d", r.Message, i))
		}
		if bytes.HasPrefix(r.Message, []byte("fail")) {
			l.out = l.c.Finish(l.out, r.Stream, uint32(codes.Aborted), "after three")
		} else {
			l.out = l.c.Finish(l.out, r.Stream, 0, "")
		}
	case mTimeout:
		l.out = l.c.Answer(l.out, r.Stream, strconv.AppendInt(nil, r.Timeout, 10))
	case mCollect:
		l.held[r.Stream] = append(l.held[r.Stream], r.Message...)
		if r.EndStream {
			l.out = l.c.Answer(l.out, r.Stream, l.held[r.Stream])
			delete(l.held, r.Stream)
		}
	case mHealth:
		l.out = l.c.Answer(l.out, r.Stream, servingBytes)
	}
}

func grpcDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(8<<20)),
	}
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpcDialOptions()...)
	must(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

func call(ctx context.Context, cc *grpc.ClientConn, method string, msg []byte) ([]byte, error) {
	var resp []byte
	err := cc.Invoke(ctx, method, &msg, &resp)
	return resp, err
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGRPCHealth(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	conn, err := grpc.NewClient("passthrough:///"+s.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(testContext(t), &healthpb.HealthCheckRequest{})
	must(t, err)
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("status %v", resp.Status)
	}
}

// TestGRPCConcurrent: many calls in flight on one connection, held and
// answered out of order, with immediate calls passing them.
func TestGRPCConcurrent(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	ctx := testContext(t)
	const held = 80
	var wg sync.WaitGroup
	errs := make(chan error, 2*held)
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Appendf(nil, "held %d", i)
			resp, err := call(ctx, cc, mHold, msg)
			if err == nil && !bytes.Equal(resp, append([]byte("answer to "), msg...)) {
				err = fmt.Errorf("call %d: answer %q", i, resp)
			}
			errs <- err
		}()
	}
	s.waitFor("held calls", func(l *testLoop) bool { return len(l.held) == held })
	// While all are held, unary calls still pass.
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Appendf(nil, "unary %d", i)
			resp, err := call(ctx, cc, mUnary, msg)
			if err == nil && !bytes.Equal(resp, msg) {
				err = fmt.Errorf("unary %d: answer %q", i, resp)
			}
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	// Answer in a random order, in a few batches.
	for range 4 {
		s.do(func(l *testLoop) {
			ids := make([]uint32, 0, len(l.held))
			for id := range l.held {
				ids = append(ids, id)
			}
			rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			for _, id := range ids[:min(len(ids), held/4)] {
				if !l.c.Live(id) {
					t.Errorf("held stream %d not live", id)
				}
				l.out = l.c.Answer(l.out, id, append([]byte("answer to "), l.held[id]...))
				delete(l.held, id)
			}
			l.flush()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	s.waitFor("streams closed", func(l *testLoop) bool { return l.c.Streams() == 0 && l.c.Pending() == 0 })
}

// TestGRPCLargeMessages: messages split over DATA frames both ways, with
// answers held back by the client's flow control.
func TestGRPCLargeMessages(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	ctx := testContext(t)
	var wg sync.WaitGroup
	for _, size := range []int{0, 1, 16379, 16380, 16384, 100000, 1 << 20, 2 << 20} {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := make([]byte, size)
				for i := range msg {
					msg[i] = byte(i * 7)
				}
				resp, err := call(ctx, cc, mUnary, msg)
				if err != nil || !bytes.Equal(resp, msg) {
					t.Errorf("size %d: %v, %d bytes back", size, err, len(resp))
				}
			}()
		}
	}
	wg.Wait()
	// One byte over the limit is refused.
	_, err := call(ctx, cc, mUnary, make([]byte, 2<<20+1))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized: %v", err)
	}
	s.waitFor("streams closed", func(l *testLoop) bool { return l.c.Streams() == 0 && l.c.Pending() == 0 })
	s.do(func(l *testLoop) {
		if l.maxPending == 0 {
			t.Error("no answer was ever held back by flow control")
		}
	})
}

func TestGRPCDeadline(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := call(ctx, cc, mTimeout, nil)
	must(t, err)
	ns, _ := strconv.ParseInt(string(resp), 10, 64)
	if ns <= 0 || ns > int64(3*time.Second) || ns < int64(100*time.Millisecond) {
		t.Fatalf("timeout %d ns", ns)
	}
	// A held call whose deadline passes: the client resets it, and the
	// late answer writes nothing, but the stream counts until then.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, err = call(ctx2, cc, mHold, []byte("slow"))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("held call: %v", err)
	}
	lateAnswer(t, s)
}

// lateAnswer waits for the one held call to be reset by the client, then
// answers it.
func lateAnswer(t *testing.T, s *loopServer) {
	t.Helper()
	s.waitFor("client reset", func(l *testLoop) bool {
		for id := range l.held {
			return !l.c.Live(id)
		}
		return false
	})
	s.do(func(l *testLoop) {
		for id := range l.held {
			if l.c.Streams() != 1 {
				t.Errorf("%d streams before the late answer", l.c.Streams())
			}
			before := len(l.out)
			l.out = l.c.Answer(l.out, id, []byte("late"))
			if len(l.out) != before {
				t.Error("answer to a reset stream written")
			}
			if l.c.Streams() != 0 {
				t.Errorf("%d streams after the late answer", l.c.Streams())
			}
			delete(l.held, id)
		}
	})
}

func TestGRPCCancel(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error)
	go func() {
		_, err := call(ctx, cc, mHold, []byte("cancel me"))
		done <- err
	}()
	s.waitFor("held call", func(l *testLoop) bool { return len(l.held) == 1 })
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	lateAnswer(t, s)
	// The connection carries on.
	if _, err := call(testContext(t), cc, mUnary, []byte("after")); err != nil {
		t.Fatal(err)
	}
}

func TestGRPCFail(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	ctx := testContext(t)
	for _, tc := range []struct {
		code codes.Code
		msg  string
	}{
		{codes.PermissionDenied, "denied"},
		{codes.ResourceExhausted, "100% used: ünïcödé\tand a\nnew line; 日本語"},
		{codes.Unavailable, ""},
		{codes.InvalidArgument, "%%%41 \x01\x7f"},
	} {
		_, err := call(ctx, cc, mFail, append([]byte{byte(tc.code)}, tc.msg...))
		st, _ := status.FromError(err)
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("got %v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
	// An unknown method.
	_, err := call(ctx, cc, "/no.Such/Method", nil)
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v", err)
	}
}

func TestGRPCServerStreaming(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	ctx := testContext(t)
	for _, first := range []string{"ok", "fail"} {
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, mStream)
		must(t, err)
		msg := []byte(first)
		must(t, st.SendMsg(&msg))
		must(t, st.CloseSend())
		for i := range 3 {
			var got []byte
			must(t, st.RecvMsg(&got))
			if want := fmt.Sprintf("%s-%d", first, i); string(got) != want {
				t.Fatalf("message %q, want %q", got, want)
			}
		}
		var got []byte
		err = st.RecvMsg(&got)
		if first == "ok" && !errors.Is(err, io.EOF) {
			t.Fatalf("end: %v", err)
		}
		if first == "fail" && (status.Code(err) != codes.Aborted || status.Convert(err).Message() != "after three") {
			t.Fatalf("end: %v", err)
		}
	}
}

func TestGRPCClientStreaming(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	st, err := cc.NewStream(testContext(t), &grpc.StreamDesc{ClientStreams: true}, mCollect)
	must(t, err)
	var want []byte
	for i := range 5 {
		msg := bytes.Repeat([]byte{byte('a' + i)}, 10000*i)
		want = append(want, msg...)
		must(t, st.SendMsg(&msg))
	}
	must(t, st.CloseSend())
	var got []byte
	must(t, st.RecvMsg(&got))
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
}

// TestGRPCClientClose: a client closing its connection sends GOAWAY; the
// connection ends once nothing is in flight.
func TestGRPCClientClose(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc, err := grpc.NewClient("passthrough:///"+s.addr(), grpcDialOptions()...)
	must(t, err)
	if _, err := call(testContext(t), cc, mUnary, []byte("x")); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	l := s.loops[0]
	s.mu.Unlock()
	cc.Close()
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed")
	}
	if l.c.Streams() != 0 {
		t.Fatalf("%d streams", l.c.Streams())
	}
}

// TestGRPCServerGoAway: a graceful drain while calls are in flight lets
// them finish; the client then opens a new connection.
func TestGRPCServerGoAway(t *testing.T) {
	s := startLoopServer(t, grpcConfig(), echoHandler)
	cc := dial(t, s.addr())
	ctx := testContext(t)
	const n = 10
	errs := make(chan error, n)
	for i := range n {
		go func() {
			msg := fmt.Appendf(nil, "%d", i)
			resp, err := call(ctx, cc, mHold, msg)
			if err == nil && !bytes.Equal(resp, msg) {
				err = fmt.Errorf("answer %q to %q", resp, msg)
			}
			errs <- err
		}()
	}
	s.waitFor("held calls", func(l *testLoop) bool { return len(l.held) == n })
	s.mu.Lock()
	first := s.loops[0]
	s.mu.Unlock()
	s.do(func(l *testLoop) {
		l.out = l.c.GoAway(l.out)
		l.flush()
	})
	time.Sleep(50 * time.Millisecond)
	s.do(func(l *testLoop) {
		for id, msg := range l.held {
			l.out = l.c.Answer(l.out, id, msg)
			delete(l.held, id)
		}
	})
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	select {
	case <-first.done:
	case <-time.After(10 * time.Second):
		t.Fatal("drained connection not closed")
	}
	if !first.closing {
		t.Fatal("Step did not say Closing")
	}
	// New calls go over a new connection.
	if _, err := call(ctx, cc, mUnary, []byte("again")); err != nil {
		t.Fatal(err)
	}
}
