package h2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/net/http2"
	xhpack "golang.org/x/net/http2/hpack"
)

// unaryClient makes the bytes of unary calls as grpc-go sends them: a
// HEADERS whose fields, after the first call, are all indexed from the
// dynamic table, and one DATA with the message and END_STREAM; each
// preceded by a connection WINDOW_UPDATE returning what the answer to
// the call before took.
type unaryClient struct {
	start []byte // preface, SETTINGS, the first call (stream 1)
	call  []byte // a later call; stream ids patched by next
	id    uint32
}

func newUnaryClient(t testing.TB, msg []byte) *unaryClient {
	var w bytes.Buffer
	fr := http2.NewFramer(&w, nil)
	var hb bytes.Buffer
	enc := xhpack.NewEncoder(&hb)
	fields := []string{
		":method", "POST", ":scheme", "http", ":path", "/test.Echo/Unary", ":authority", "127.0.0.1:4000",
		"content-type", "application/grpc", "user-agent", "grpc-go/1.85.0", "te", "trailers",
	}
	block := func() []byte {
		hb.Reset()
		for i := 0; i < len(fields); i += 2 {
			must(t, enc.WriteField(xhpack.HeaderField{Name: fields[i], Value: fields[i+1]}))
		}
		return bytes.Clone(hb.Bytes())
	}
	u := &unaryClient{id: 1}
	w.WriteString(clientPreface)
	must(t, fr.WriteSettings())
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(), EndHeaders: true}))
	must(t, fr.WriteData(1, true, grpcMessage(msg)))
	u.start = bytes.Clone(w.Bytes())
	w.Reset()
	must(t, fr.WriteWindowUpdate(0, uint32(prefixLen+len(msg))))
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(), EndHeaders: true}))
	must(t, fr.WriteData(3, true, grpcMessage(msg)))
	u.call = bytes.Clone(w.Bytes())
	return u
}

// next returns the next call's bytes, with a new stream id.
func (u *unaryClient) next() []byte {
	u.id += 2
	headers := u.call[frameHeaderLen+4:]
	binary.BigEndian.PutUint32(headers[5:], u.id)
	h := parseHeader(headers)
	binary.BigEndian.PutUint32(headers[frameHeaderLen+h.length+5:], u.id)
	return u.call
}

// cycle runs one call through c: Step to its Message, Answer, Step to
// NeedMore.
func cycle(tb testing.TB, c *Conn, in, out []byte) []byte {
	n, out, ev := c.Step(in, out[:0])
	if ev != Message {
		tb.Fatalf("event %v, n %d of %d, streams %d, out %x", ev, n, len(in), c.Streams(), out)
	}
	r := c.Request()
	out = c.Answer(out, r.Stream, r.Message)
	m, out, ev := c.Step(in[n:], out)
	if ev != NeedMore || n+m != len(in) {
		tb.Fatalf("event %v, %d of %d consumed", ev, n+m, len(in))
	}
	return out
}

func startUnary(tb testing.TB, msg []byte) (*Conn, *unaryClient, []byte) {
	c := NewConn(testConfig())
	u := newUnaryClient(tb, msg)
	out := c.Start(make([]byte, 0, 64<<10))
	out = cycle(tb, c, u.start, out)
	return c, u, out
}

// TestUnaryAllocs: the steady-state cycle allocates nothing.
func TestUnaryAllocs(t *testing.T) {
	for _, size := range []int{0, 100, 16000} {
		msg := bytes.Repeat([]byte("m"), size)
		c, u, out := startUnary(t, msg)
		for range 10 {
			out = cycle(t, c, u.next(), out)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			out = cycle(t, c, u.next(), out)
		})
		if allocs != 0 {
			t.Fatalf("size %d: %v allocations a call", size, allocs)
		}
		if c.Streams() != 0 {
			t.Fatal("streams left")
		}
	}
}

// TestSplitAllocs: a message reassembled from several frames, once the
// connection's spare buffers are warm, allocates nothing either.
func TestSplitAllocs(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	wire := grpcMessage(make([]byte, 40000))
	id := uint32(1)
	send := func() {
		p.request(id, "/test.Echo/Unary")
		for b := wire; len(b) > 0; {
			k := min(len(b), MaxFrameBytes)
			p.data(id, k == len(b), b[:k])
			b = b[k:]
		}
		id += 2
	}
	for range 5 {
		send()
	}
	in := bytes.Clone(p.w.Bytes())
	p.w.Reset()
	out := make([]byte, 0, 1<<20)
	run := func(in []byte) {
		for len(in) > 0 {
			n, o, ev := p.c.Step(in, out[:0])
			in, out = in[n:], o
			if ev == Message {
				r := p.c.Request()
				out = p.c.Answer(out, r.Stream, r.Message[:10])
			}
		}
	}
	run(in)
	// Batches with new stream ids: AllocsPerRun runs once to warm up.
	var batches [][]byte
	for range 11 {
		for range 5 {
			send()
		}
		batches = append(batches, bytes.Clone(p.w.Bytes()))
		p.w.Reset()
	}
	allocs := testing.AllocsPerRun(10, func() {
		run(batches[0])
		batches = batches[1:]
	})
	if allocs != 0 {
		t.Fatalf("%v allocations for 5 split calls", allocs)
	}
	if p.c.Streams() != 0 {
		t.Fatal("streams left")
	}
}

func BenchmarkUnary(b *testing.B) {
	for _, size := range []int{16, 1000} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			c, u, out := startUnary(b, bytes.Repeat([]byte("m"), size))
			b.ReportAllocs()
			b.SetBytes(int64(len(u.call)))
			for b.Loop() {
				out = cycle(b, c, u.next(), out)
			}
		})
	}
}
