//go:build linux

package httploop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgated/tollgated/h2"
	"github.com/tollgated/tollgated/internal/await"
)

// grpcServer is a loop with a gRPC listener whose handler answers
// grpc.health.v1 Check: SERVING at once for service "", and for service
// "hold" later, when the test releases it (the loop answers it from
// OnTick, as a shard completes a postponed decision).
type grpcServer struct {
	*server
	gaddr string

	mu      sync.Mutex
	held    []StreamRef
	release bool
}

var healthCheck = "/grpc.health.v1.Health/Check"

func startGRPC(t *testing.T, cfg Config, maxConns int) *grpcServer {
	t.Helper()
	gln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &grpcServer{gaddr: gln.Addr().String()}
	serving, _ := proto.Marshal(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
	cfg.GRPC = &GRPC{Listener: gln, H2: h2.Config{Methods: []string{healthCheck}, MaxStreams: 16, MaxMessageBytes: 1 << 10,
		MaxHeaderListBytes: 8 << 10}, MaxConns: maxConns,
		Handler: func(x *StreamCtx) {
			if x.Event != h2.Message {
				return
			}
			var req healthpb.HealthCheckRequest
			switch {
			case x.Request.Method != 0:
				g.Loop.Fail(x.Ref, uint32(codes.Unimplemented), "no such method")
			case proto.Unmarshal(x.Request.Message, &req) != nil:
				g.Loop.Fail(x.Ref, uint32(codes.InvalidArgument), "not a HealthCheckRequest")
			case req.Service == "hold":
				g.mu.Lock()
				g.held = append(g.held, x.Ref)
				g.mu.Unlock()
			default:
				g.Loop.Answer(x.Ref, serving)
			}
		}}
	cfg.Holding = func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.held) > 0
	}
	cfg.OnTick = func(int64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.release {
			return
		}
		for _, r := range g.held {
			g.Loop.Answer(r, serving)
		}
		g.held = nil
	}
	cfg.Tick = time.Millisecond
	// The handler reaches the loop through g: set before the loop runs.
	g.server = prepare(t, testHandler, cfg)
	g.server.run()
	return g
}

func (g *grpcServer) releaseHeld() {
	g.mu.Lock()
	g.release = true
	g.mu.Unlock()
}

func (g *grpcServer) heldCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

func grpcClient(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return healthpb.NewHealthClient(c)
}

// TestGRPCBesideHTTP: one loop serves HTTP/1.1 on its listener and gRPC on
// the other; a held call does not hold the connection's other calls, and
// is answered when the handler answers it.
func TestGRPCBesideHTTP(t *testing.T) {
	g := startGRPC(t, Config{}, 0)
	hc := grpcClient(t, g.gaddr)
	ctx := context.Background()
	held := make(chan error, 1)
	go func() {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "hold"})
		held <- err
	}()
	await.True(t, "the call is held", func() bool { return g.heldCount() == 1 })
	for range 10 {
		if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("a call beside the held one: %v %v", r, err)
		}
	}
	c := dial(t, g.addr)
	write(t, c, get("/plain"))
	if _, body := readResponse(t, c, bufio.NewReader(c), "GET"); body != "/plain" {
		t.Fatalf("HTTP beside gRPC: %q", body)
	}
	g.releaseHeld()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	err := clientConn(t, g.gaddr).Invoke(ctx, "/grpc.health.v1.Health/Watch", &healthpb.HealthCheckRequest{}, new(healthpb.HealthCheckResponse))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("an unlisted method: %v", err)
	}
	if st := g.Stats(); st.Requests < 12 {
		t.Fatalf("%d requests counted", st.Requests)
	}
}

func clientConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGRPCConnectionsAreBounded: past GRPC.MaxConns a gRPC connection is
// closed at once and counted as rejected.
func TestGRPCConnectionsAreBounded(t *testing.T) {
	g := startGRPC(t, Config{}, 1)
	first, err := net.Dial("tcp", g.gaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	await.True(t, "the first connection is open", func() bool { return g.Stats().Conns == 1 })
	second, err := net.Dial("tcp", g.gaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [64]byte
	if _, err := second.Read(b[:]); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a connection beyond the bound was served: %v", err)
	}
	// The loop publishes its counters after the pass that closed the
	// socket, so the client may see the close first.
	await.True(t, "the rejection is counted", func() bool { return g.Stats().Rejected == 1 })
}

// TestGRPCDrainAnswersHeldCallsThenCloses: a drain sends GOAWAY, keeps the
// connection while a call is held, answers it, and then ends.
func TestGRPCDrainAnswersHeldCallsThenCloses(t *testing.T) {
	g := startGRPC(t, Config{}, 0)
	hc := grpcClient(t, g.gaddr)
	held := make(chan error, 1)
	go func() {
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "hold"})
		held <- err
	}()
	await.True(t, "the call is held", func() bool { return g.heldCount() == 1 })
	g.Drain(time.Now().Add(10 * time.Second))
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-g.done:
		t.Fatalf("the loop ended (%v) with a call held", err)
	default:
	}
	g.releaseHeld()
	if err := <-held; err != nil {
		t.Fatalf("the held call: %v", err)
	}
	if err := g.wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestGRPCDrainGoesAwayInTwoSteps: over a raw HTTP/2 client, a drain's
// first GOAWAY names the largest stream id and comes with a PING; a call
// the client opens before it has read it is answered, not refused. The
// final GOAWAY names that call and closes the connection: at once when
// the client acknowledges the PING, after goAwayGrace when it does not, or
// after half the time left when the drain's deadline is nearer.
func TestGRPCDrainGoesAwayInTwoSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  bool
		left time.Duration // the drain's time
	}{
		{"acknowledged", true, 10 * time.Second},
		{"silent", false, 10 * time.Second},
		{"silent, the deadline near", false, 400 * time.Millisecond},
	} {
		ack, early := tc.ack, tc.ack || tc.left < 2*time.Duration(goAwayGrace)
		t.Run(tc.name, func(t *testing.T) {
			g := startGRPC(t, Config{}, 0)
			nc := dial(t, g.gaddr)
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			fr := http2.NewFramer(nc, nc)
			write(t, nc, http2.ClientPreface)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			if _, ok := readFrame(t, fr).(*http2.SettingsFrame); !ok { // the loop serves the connection
				t.Fatal("the server's first frame is not its SETTINGS")
			}
			g.Drain(time.Now().Add(tc.left))
			var ping [8]byte
			var first time.Time
			for f := readFrame(t, fr); ; f = readFrame(t, fr) {
				if ga, ok := f.(*http2.GoAwayFrame); ok {
					if ga.LastStreamID != 1<<31-1 || ga.ErrCode != http2.ErrCodeNo {
						t.Fatalf("first GOAWAY: last %d, %v", ga.LastStreamID, ga.ErrCode)
					}
					p, ok := readFrame(t, fr).(*http2.PingFrame)
					if !ok || p.IsAck() {
						t.Fatalf("no PING after the first GOAWAY: %v", p)
					}
					ping, first = p.Data, time.Now()
					break
				}
			}
			// A call sent before the client read the GOAWAY.
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", healthCheck},
				{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			if err := fr.WriteData(1, true, make([]byte, 5)); err != nil { // an empty message
				t.Fatal(err)
			}
			answered := false
			for !answered {
				switch f := readFrame(t, fr).(type) {
				case *http2.RSTStreamFrame:
					t.Fatalf("the call racing the first GOAWAY was reset: %v", f.ErrCode)
				case *http2.GoAwayFrame:
					t.Fatalf("a GOAWAY before the call's answer: last %d", f.LastStreamID)
				case *http2.HeadersFrame:
					answered = f.StreamID == 1 && f.StreamEnded()
				}
			}
			if ack {
				if err := fr.WritePing(true, ping); err != nil {
					t.Fatal(err)
				}
			}
			for {
				f := readFrame(t, fr)
				ga, ok := f.(*http2.GoAwayFrame)
				if !ok {
					continue
				}
				waited := time.Since(first)
				if ga.LastStreamID != 1 || ga.ErrCode != http2.ErrCodeNo {
					t.Fatalf("final GOAWAY: last %d, %v", ga.LastStreamID, ga.ErrCode)
				}
				// The grace is a second: the ACK (or a near deadline)
				// brings it well before half of it, silence not before.
				if early == (waited >= time.Duration(goAwayGrace)/2) {
					t.Fatalf("final GOAWAY %v after the first (%s)", waited, tc.name)
				}
				break
			}
			if _, err := fr.ReadFrame(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the final GOAWAY: %v, want the connection closed", err)
			}
		})
	}
}

func readFrame(t *testing.T, fr *http2.Framer) http2.Frame {
	t.Helper()
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	return f
}
