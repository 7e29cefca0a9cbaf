package h2

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
)

// maxOutPerIn bounds what the server writes per byte read, over a whole
// connection, plus startOutSlack for Start and a final GOAWAY. The worst
// ratio is a HEADERS of a few indexed fields (12 bytes) drawing an early
// trailers-only answer and a RST_STREAM (under 100).
const (
	maxOutPerIn   = 10
	startOutSlack = 256
)

// maxFuzzInput bounds an input, so each run (and minimizing one) stays
// quick.
const maxFuzzInput = 16 << 10

func fuzzConfig() *Config {
	return &Config{
		Methods:            []string{"/test.Echo/Unary", "/test.Echo/Stream"},
		MaxStreams:         4,
		MaxMessageBytes:    1024,
		MaxHeaderListBytes: 1024,
		MaxHeldBytes:       4096,
	}
}

// FuzzConn feeds arbitrary bytes after a valid preface, in random
// chunks, answering every event at once (one in five at the next
// NeedMore instead), draining at a random point for some chunkings (and
// for some, forcing the final GOAWAY later), and checks that nothing panics, the stream count and
// held bytes stay bounded, the invariants hold after every call, and the
// output stays within maxOutPerIn of the input.
func FuzzConn(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(uint64(1), seed)
		f.Add(uint64(3), seed) // drains
		f.Add(uint64(7), seed) // drains, then forces the final GOAWAY
	}
	c := NewConn(fuzzConfig())
	f.Fuzz(func(t *testing.T, chunking uint64, data []byte) {
		if len(data) > maxFuzzInput {
			return
		}
		c.Reset()
		runConn(t, c, chunking, append([]byte(clientPreface), data...))
	})
}

func runConn(t *testing.T, c *Conn, chunking uint64, input []byte) {
	rng := rand.New(rand.NewPCG(chunking, chunking>>32))
	out := c.Start(nil)
	fed, wrote := 0, len(out)
	account := func(o []byte) {
		wrote += len(o)
		if limit := maxOutPerIn*fed + startOutSlack; wrote > limit {
			t.Fatalf("wrote %d for %d read", wrote, fed)
		}
		if err := c.check(); err != nil {
			t.Fatal(err)
		}
		if c.Streams() > int(c.cfg.MaxStreams) || c.Pending() > int(c.cfg.MaxStreams)*c.maxHeld {
			t.Fatalf("%d streams, %d pending", c.Streams(), c.Pending())
		}
	}
	var in []byte
	var held []uint32 // streams answered at the next NeedMore
	answer := 0
	// GoAway's first call when this much is fed, its second at force.
	drain, force := -1, -1
	if chunking&2 != 0 {
		drain = rng.IntN(len(input) + 1)
		if chunking&4 != 0 {
			force = drain + rng.IntN(len(input)+1)
		}
	}
	for len(input) > 0 {
		k := min(len(input), 1+rng.IntN(MinInputBytes))
		if rng.IntN(4) == 0 {
			k = min(len(input), 1+rng.IntN(16))
		}
		in = append(in, input[:k]...)
		input = input[k:]
		fed += k
		for _, at := range [...]*int{&drain, &force} {
			if *at >= 0 && fed >= *at {
				*at = -1
				out = c.GoAway(out[:0])
				account(out)
			}
		}
		for {
			n, o, ev := c.Step(in, out[:0])
			if n < 0 || n > len(in) {
				t.Fatalf("consumed %d of %d", n, len(in))
			}
			in = in[n:]
			out = o
			account(o)
			switch ev {
			case NeedMore:
				out = out[:0]
				for _, id := range held {
					out = c.Answer(out, id, []byte("late"))
				}
				held = held[:0]
				account(out)
			case Closing:
				return
			default:
				r := c.Request()
				if answer%5 == 4 {
					held = append(held, r.Stream)
				} else {
					out = respond(c, r, answer, out[:0])
					account(out)
				}
				answer++
				continue
			}
			break
		}
	}
}

// respond answers a request at once, in one of a few ways.
func respond(c *Conn, r *Request, k int, out []byte) []byte {
	switch k % 4 {
	case 0:
		return c.Answer(out, r.Stream, r.Message)
	case 1:
		return c.Fail(out, r.Stream, 13, "fuzz")
	case 2:
		out = c.Send(out, r.Stream, r.Message)
		return c.Finish(out, r.Stream, 0, "")
	}
	if r.EndStream {
		return c.Answer(out, r.Stream, nil)
	}
	return c.Send(out, r.Stream, r.Message) // more may come: answered later
}

// fuzzSeeds are client byte streams after the preface: what a real
// grpc-go client sends, and sequences framed with x/net.
func fuzzSeeds(t testing.TB) [][]byte {
	seeds := [][]byte{captureGRPC(t)}
	framed := func(build func(p *peer)) {
		p := newPeer(t, fuzzConfig())
		must(t, p.fr.WriteSettings())
		build(p)
		seeds = append(seeds, bytes.Clone(p.w.Bytes()))
	}
	framed(func(p *peer) { p.unary(1, "/test.Echo/Unary", []byte("hello")) })
	framed(func(p *peer) {
		p.request(1, "/test.Echo/Stream", "grpc-timeout", "10S")
		m := grpcMessage(bytes.Repeat([]byte("ab"), 400))
		p.data(1, false, m[:100])
		p.data(1, false, append(m[100:], grpcMessage([]byte("x"))...))
		p.headers(1, true, "x-trailer", "t")
	})
	framed(func(p *peer) {
		blk := p.block(requestFields("/test.Echo/Unary", "x-long", strings.Repeat("z", 300))...)
		must(t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:20], PadLength: 3,
			Priority: http2.PriorityParam{StreamDep: 0, Weight: 3}}))
		must(t, p.fr.WriteContinuation(1, true, blk[20:]))
		must(t, p.fr.WriteDataPadded(1, true, grpcMessage([]byte("padded")), make([]byte, 9)))
	})
	framed(func(p *peer) {
		must(t, p.fr.WritePing(false, [8]byte{1}))
		must(t, p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 3}))
		p.unary(1, "/test.Echo/Unary", make([]byte, 100))
		must(t, p.fr.WriteWindowUpdate(1, 50))
		must(t, p.fr.WriteWindowUpdate(0, 50))
		must(t, p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000}))
		must(t, p.fr.WritePriority(1, http2.PriorityParam{StreamDep: 1}))
	})
	framed(func(p *peer) {
		// Streams around a server drain's PING ACK (runConn calls GoAway).
		p.unary(1, "/test.Echo/Unary", nil)
		must(t, p.fr.WritePing(true, [8]byte([]byte(drainPing))))
		p.unary(3, "/test.Echo/Unary", nil)
		must(t, p.fr.WritePing(true, [8]byte([]byte(drainPing))))
	})
	framed(func(p *peer) {
		for id := uint32(1); id < 40; id += 2 {
			p.unary(id, "/test.Echo/Unary", nil)
			must(t, p.fr.WriteRSTStream(id, http2.ErrCodeCancel))
		}
		must(t, p.fr.WriteGoAway(39, http2.ErrCodeNo, nil))
	})
	framed(func(p *peer) {
		p.headers(1, false, ":method", "GET", ":scheme", "http", ":path", "/", "content-type", "text/plain")
		p.headers(3, true, requestFields("/x")...)
		m := grpcMessage([]byte("zz"))
		m[0] = 1
		p.request(5, "/test.Echo/Unary")
		p.data(5, true, m)
	})
	return seeds
}

var (
	captureOnce sync.Once
	captured    []byte
)

// captureGRPC records what a grpc-go client sends for a few calls, after
// the preface.
func captureGRPC(t testing.TB) []byte {
	captureOnce.Do(func() {
		var mu sync.Mutex
		var rec []byte
		s := startLoopServer(t, grpcConfig(), echoHandler)
		s.record = func(b []byte) {
			mu.Lock()
			rec = append(rec, b...)
			mu.Unlock()
		}
		cc, err := grpc.NewClient("passthrough:///"+s.addr(), grpcDialOptions()...)
		must(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, msg := range [][]byte{[]byte("one"), []byte("two"), make([]byte, 1000)} {
			if _, err := call(ctx, cc, mUnary, msg); err != nil {
				t.Fatal(err)
			}
		}
		call(ctx, cc, mFail, []byte{5, 'n', 'o'})
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, mStream)
		must(t, err)
		msg := []byte("s")
		must(t, st.SendMsg(&msg))
		must(t, st.CloseSend())
		for {
			var got []byte
			if st.RecvMsg(&got) != nil {
				break
			}
		}
		cc.Close()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		captured = bytes.Clone(rec)
		mu.Unlock()
		if !bytes.HasPrefix(captured, []byte(clientPreface)) {
			t.Fatal("no preface captured")
		}
		captured = captured[len(clientPreface):]
	})
	return captured
}

// TestCapturedCalls: the captured grpc-go bytes replay as the calls made.
func TestCapturedCalls(t *testing.T) {
	c := NewConn(grpcConfig())
	out := c.Start(nil)
	in := append([]byte(clientPreface), captureGRPC(t)...)
	var methods []string
	for {
		n, o, ev := c.Step(in, out[:0])
		in, out = in[n:], o
		if ev == NeedMore || ev == Closing {
			break
		}
		r := c.Request()
		methods = append(methods, grpcMethods[r.Method])
		out = c.Answer(out, r.Stream, r.Message)
	}
	want := []string{mUnary, mUnary, mUnary, mFail, mStream}
	if strings.Join(methods, " ") != strings.Join(want, " ") {
		t.Fatalf("calls %v, want %v", methods, want)
	}
}
