package h2

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/http2"
)

func TestUnary(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.unary(1, "/test.Echo/Unary", []byte("hello"))
	evs := p.pump()
	if len(evs) != 1 || evs[0].ev != Message {
		t.Fatalf("events %v", evs)
	}
	r := evs[0].req
	if r.Stream != 1 || r.Method != 0 || string(r.Message) != "hello" || !r.EndStream || r.Timeout != 0 {
		t.Fatalf("request %+v", r)
	}
	if p.c.Streams() != 1 || !p.c.Live(1) {
		t.Fatal("stream not live")
	}
	p.out = p.c.Answer(p.out, 1, []byte("world"))
	fs := p.expect("HEADERS", "DATA", "HEADERS")
	if fs[0].fields[":status"] != "200" || fs[0].fields["content-type"] != "application/grpc" || fs[0].flags&flagEndStream != 0 {
		t.Fatalf("headers %v", fs[0].fields)
	}
	if !bytes.Equal(fs[1].data, grpcMessage([]byte("world"))) {
		t.Fatalf("data %q", fs[1].data)
	}
	if fs[2].fields["grpc-status"] != "0" || fs[2].flags&flagEndStream == 0 || len(fs[2].fields) != 1 {
		t.Fatalf("trailers %v", fs[2].fields)
	}
	if p.c.Streams() != 0 || p.c.Live(1) {
		t.Fatal("stream still counted")
	}
	// Answering again writes nothing.
	if out := p.c.Answer(nil, 1, []byte("x")); len(out) != 0 {
		t.Fatal("second answer written")
	}
	p.checkInvariants()
}

func TestUnknownMethodAndTimeout(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/other/M", "grpc-timeout", "250m")
	p.data(1, true, grpcMessage(nil))
	evs := p.pump()
	if len(evs) != 1 || evs[0].req.Method != -1 || evs[0].req.Timeout != 250e6 || len(evs[0].req.Message) != 0 {
		t.Fatalf("events %+v", evs)
	}
}

func TestParseTimeout(t *testing.T) {
	for v, want := range map[string]int64{
		"1H": 3600e9, "2M": 120e9, "5S": 5e9, "100m": 100e6, "7u": 7e3, "9n": 9,
		"99999999H": 1<<63 - 1, "0n": 1, "12345678n": 12345678,
	} {
		got, ok := parseTimeout([]byte(v))
		if !ok || got != want {
			t.Errorf("%s: %d %v, want %d", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "S", "1", "123456789S", "1s", "-1S", "1.5S", " 1S"} {
		if _, ok := parseTimeout([]byte(v)); ok {
			t.Errorf("%q accepted", v)
		}
	}
}

func TestSplitMessage(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	msg := bytes.Repeat([]byte("0123456789"), 4000) // 40000 bytes, over three frames
	wire := grpcMessage(msg)
	p.request(1, "/test.Echo/Unary")
	for len(wire) > 0 {
		n := min(len(wire), 16384)
		p.data(1, n == len(wire), wire[:n])
		wire = wire[n:]
	}
	evs := p.pump()
	if len(evs) != 1 || !bytes.Equal(evs[0].req.Message, msg) || !evs[0].req.EndStream {
		t.Fatalf("events %d", len(evs))
	}
	// The reply goes out in frames of the client's MAX_FRAME_SIZE.
	p.out = p.c.Answer(p.out, 1, msg)
	fs := p.expect("HEADERS", "DATA", "DATA", "DATA", "HEADERS")
	var got []byte
	for _, f := range fs[1:4] {
		got = append(got, f.data...)
	}
	if !bytes.Equal(got, grpcMessage(msg)) {
		t.Fatal("answer corrupted")
	}
}

func TestClientStreaming(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/test.Echo/Stream")
	// Three messages in one frame, a fourth split across two, then END_STREAM alone.
	var b []byte
	for _, m := range []string{"a", "bb", "ccc"} {
		b = append(b, grpcMessage([]byte(m))...)
	}
	fourth := grpcMessage([]byte("dddd"))
	b = append(b, fourth[:3]...)
	p.data(1, false, b)
	evs := p.pump()
	if len(evs) != 3 {
		t.Fatalf("%d events", len(evs))
	}
	for i, m := range []string{"a", "bb", "ccc"} {
		if evs[i].ev != Message || string(evs[i].req.Message) != m || evs[i].req.EndStream {
			t.Fatalf("event %d: %+v", i, evs[i])
		}
	}
	p.data(1, false, fourth[3:])
	evs = p.pump()
	if len(evs) != 1 || string(evs[0].req.Message) != "dddd" || evs[0].req.EndStream {
		t.Fatalf("events %+v", evs)
	}
	p.data(1, true, nil)
	evs = p.pump()
	if len(evs) != 1 || evs[0].ev != HalfClosed || evs[0].req.Stream != 1 {
		t.Fatalf("events %+v", evs)
	}
	p.out = p.c.Send(p.out, 1, []byte("x"))
	p.out = p.c.Send(p.out, 1, []byte("y"))
	p.out = p.c.Finish(p.out, 1, 0, "")
	p.expect("HEADERS", "DATA", "DATA", "HEADERS")
	if p.c.Streams() != 0 {
		t.Fatal("stream kept")
	}
}

func TestHalfClosedWithHeaders(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.headers(1, true, requestFields("/test.Echo/Unary")...)
	evs := p.pump()
	if len(evs) != 1 || evs[0].ev != HalfClosed || !evs[0].req.EndStream || evs[0].req.Message != nil {
		t.Fatalf("events %+v", evs)
	}
	p.out = p.c.Fail(p.out, 1, 13, "no message")
	fs := p.expect("HEADERS")
	if fs[0].fields["grpc-status"] != "13" || fs[0].fields["grpc-message"] != "no message" || fs[0].flags&flagEndStream == 0 {
		t.Fatalf("fields %v", fs[0].fields)
	}
}

func TestFailPercentEncoding(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.unary(1, "/test.Echo/Fail", nil)
	p.pump()
	msg := "50% off: ünïcödé\r\n\x00 end"
	p.out = p.c.Fail(p.out, 1, 7, msg)
	fs := p.expect("HEADERS")
	want := "50%25 off: %C3%BCn%C3%AFc%C3%B6d%C3%A9%0D%0A%00 end"
	if got := fs[0].fields["grpc-message"]; got != want {
		t.Fatalf("grpc-message %q, want %q", got, want)
	}
	if fs[0].fields[":status"] != "200" || fs[0].fields["grpc-status"] != "7" {
		t.Fatalf("fields %v", fs[0].fields)
	}
	// A long message is cut, at a rune boundary.
	p.unary(3, "/test.Echo/Fail", nil)
	p.pump()
	p.out = p.c.Fail(p.out, 3, 2, strings.Repeat("é", 1000))
	fs = p.expect("HEADERS")
	if got := fs[0].fields["grpc-message"]; len(got) != 6*(MaxStatusMessageBytes/2) {
		t.Fatalf("grpc-message of %d bytes", len(got))
	}
}

func TestFailWhileClientSends(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/test.Echo/Stream")
	p.data(1, false, grpcMessage([]byte("a")))
	p.pump()
	p.out = p.c.Fail(p.out, 1, 9, "stop")
	p.expect("HEADERS", "RST_STREAM(NO_ERROR)")
	if p.c.Streams() != 0 {
		t.Fatal("stream kept")
	}
	// What the client had in flight is ignored.
	p.data(1, false, grpcMessage([]byte("b")))
	p.headers(1, true, "x-trailer", "1")
	if evs := p.pump(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}
	p.expect()
}

func TestEarlyAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields []string
		status string
		code   string
	}{
		{"content-type", []string{":method", "POST", ":scheme", "http", ":path", "/test.Echo/Unary", "content-type", "text/plain"}, "415", "3"},
		{"no content-type", []string{":method", "POST", ":scheme", "http", ":path", "/test.Echo/Unary"}, "415", "3"},
		{"GET", []string{":method", "GET", ":scheme", "http", ":path", "/test.Echo/Unary", "content-type", "application/grpc"}, "405", "13"},
		{"timeout", requestFields("/test.Echo/Unary", "grpc-timeout", "10x"), "400", "13"},
		{"long timeout", requestFields("/test.Echo/Unary", "grpc-timeout", "123456789S"), "400", "13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, testConfig())
			p.handshake()
			p.headers(1, false, tc.fields...)
			if evs := p.pump(); len(evs) != 0 {
				t.Fatalf("events %v", evs)
			}
			fs := p.expect("HEADERS", "RST_STREAM(NO_ERROR)")
			if fs[0].fields[":status"] != tc.status || fs[0].fields["grpc-status"] != tc.code || fs[0].flags&flagEndStream == 0 {
				t.Fatalf("fields %v", fs[0].fields)
			}
			if p.c.Streams() != 0 {
				t.Fatal("stream counted")
			}
			// The DATA the client had sent is ignored.
			p.data(1, true, grpcMessage(nil))
			p.pump()
			p.expect()
		})
	}
}

func TestMalformedRequests(t *testing.T) {
	base := requestFields("/test.Echo/Unary")
	for _, tc := range []struct {
		name   string
		fields []string
	}{
		{"upper case", append(append([]string{}, base...), "X-Upper", "1")},
		{"connection", append(append([]string{}, base...), "connection", "close")},
		{"keep-alive", append(append([]string{}, base...), "keep-alive", "1")},
		{"te gzip", append(append([]string{}, base...), "te", "gzip")},
		{"no path", []string{":method", "POST", ":scheme", "http", "content-type", "application/grpc"}},
		{"empty path", []string{":method", "POST", ":scheme", "http", ":path", "", "content-type", "application/grpc"}},
		{"no scheme", []string{":method", "POST", ":path", "/x", "content-type", "application/grpc"}},
		{"no method", []string{":scheme", "http", ":path", "/x", "content-type", "application/grpc"}},
		{"pseudo after regular", []string{":method", "POST", "content-type", "application/grpc", ":scheme", "http", ":path", "/x"}},
		{"unknown pseudo", append([]string{":foo", "bar"}, base...)},
		{"response pseudo", append([]string{":status", "200"}, base...)},
		{"duplicate pseudo", append([]string{":path", "/x"}, base...)},
		{"value with LF", append(append([]string{}, base...), "x-a", "a\nb")},
		{"value with leading space", append(append([]string{}, base...), "x-a", " a")},
		{"name with space", append(append([]string{}, base...), "x a", "a")},
		{"bad content-length", append(append([]string{}, base...), "content-length", "x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, testConfig())
			p.handshake()
			p.headers(1, false, tc.fields...)
			p.pump()
			p.expect("RST_STREAM(PROTOCOL_ERROR)")
			if p.c.Streams() != 0 || p.closed {
				t.Fatal("stream counted or connection closed")
			}
			// The connection carries on.
			p.unary(3, "/test.Echo/Unary", nil)
			if evs := p.pump(); len(evs) != 1 {
				t.Fatalf("events %v", evs)
			}
		})
	}
}

func TestContentLength(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/test.Echo/Unary", "content-length", "6")
	p.data(1, true, grpcMessage([]byte("a")))
	evs := p.pump()
	if len(evs) != 1 {
		t.Fatalf("events %v", evs)
	}
	p.out = p.c.Answer(p.out, 1, nil)
	p.expect("HEADERS", "DATA", "HEADERS")
	p.request(3, "/test.Echo/Unary", "content-length", "5")
	p.data(3, true, grpcMessage([]byte("a")))
	if evs := p.pump(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}
	p.expect("RST_STREAM(PROTOCOL_ERROR)")
}

func TestTrailers(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/test.Echo/Unary")
	p.data(1, false, grpcMessage([]byte("a")))
	p.headers(1, true, "x-trailer", "v")
	evs := p.pump()
	if len(evs) != 2 || evs[0].ev != Message || evs[1].ev != HalfClosed {
		t.Fatalf("events %v", evs)
	}
	// Trailers without END_STREAM are malformed.
	p.request(3, "/test.Echo/Unary")
	p.headers(3, false, "x-trailer", "v")
	p.pump()
	p.expect("RST_STREAM(PROTOCOL_ERROR)")
	// So are pseudo-headers in trailers.
	p.request(5, "/test.Echo/Unary")
	p.headers(5, true, ":path", "/x")
	p.pump()
	p.expect("RST_STREAM(PROTOCOL_ERROR)")
	// HEADERS after END_STREAM: the stream is half-closed (remote).
	p.headers(1, true, "x-trailer", "v")
	p.pump()
	p.expect("RST_STREAM(STREAM_CLOSED)")
	if p.c.Live(1) {
		t.Fatal("stream 1 live after reset")
	}
	if p.c.Streams() != 1 {
		t.Fatalf("%d streams; the loop still owes stream 1", p.c.Streams())
	}
	if out := p.c.Answer(nil, 1, []byte("x")); len(out) != 0 {
		t.Fatal("answer on a reset stream written")
	}
	if p.c.Streams() != 0 {
		t.Fatal("stream kept")
	}
}

func TestIncompleteMessageAtEnd(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/test.Echo/Unary")
	p.data(1, true, grpcMessage([]byte("abc"))[:6])
	if evs := p.pump(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}
	fs := p.expect("HEADERS")
	if fs[0].fields["grpc-status"] != "13" {
		t.Fatalf("fields %v", fs[0].fields)
	}
	if p.c.Streams() != 0 {
		t.Fatal("stream kept")
	}
}

func TestMessageTooLarge(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMessageBytes = 100
	p := newPeer(t, cfg)
	p.handshake()
	p.request(1, "/test.Echo/Unary")
	p.data(1, false, grpcMessage(make([]byte, 101))[:50])
	if evs := p.pump(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}
	fs := p.expect("HEADERS", "RST_STREAM(NO_ERROR)")
	if fs[0].fields["grpc-status"] != "8" {
		t.Fatalf("fields %v", fs[0].fields)
	}
	p.data(1, true, make([]byte, 56))
	p.pump()
	p.expect()
	// Exactly the limit passes.
	p.unary(3, "/test.Echo/Unary", make([]byte, 100))
	if evs := p.pump(); len(evs) != 1 || len(evs[0].req.Message) != 100 {
		t.Fatalf("events %v", evs)
	}
}

func TestCompressedMessage(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/test.Echo/Unary", "grpc-encoding", "gzip")
	m := grpcMessage([]byte("zzz"))
	m[0] = 1
	p.data(1, true, m)
	if evs := p.pump(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}
	fs := p.expect("HEADERS")
	if fs[0].fields["grpc-status"] != "12" {
		t.Fatalf("fields %v", fs[0].fields)
	}
}

func TestPadding(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	must(t, p.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: 1, BlockFragment: p.block(requestFields("/test.Echo/Unary")...), EndHeaders: true,
		PadLength: 20, Priority: http2.PriorityParam{StreamDep: 0, Weight: 7},
	}))
	must(t, p.fr.WriteDataPadded(1, true, grpcMessage([]byte("pad")), make([]byte, 30)))
	evs := p.pump()
	if len(evs) != 1 || string(evs[0].req.Message) != "pad" {
		t.Fatalf("events %v", evs)
	}
	// Padding as long as the payload is a connection error.
	p.raw(http2.FrameData, http2.FlagDataPadded, 1, []byte{3, 0, 0})
	p.goaway(http2.ErrCodeProtocol)
}

func TestPing(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	must(t, p.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}))
	must(t, p.fr.WritePing(true, [8]byte{9}))
	p.pump()
	fs := p.expect("PING")
	if fs[0].flags&flagAck == 0 || !bytes.Equal(fs[0].data, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("ping %v", fs[0])
	}
}

func TestSettings(t *testing.T) {
	p := newPeer(t, testConfig())
	fs := p.handshake(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20}, http2.Setting{ID: 0x99, Val: 5})
	s := fs[0].setting
	if s[http2.SettingMaxConcurrentStreams] != 8 || s[http2.SettingInitialWindowSize] < 64<<10+5 ||
		s[http2.SettingMaxHeaderListSize] != 8<<10 || s[http2.SettingHeaderTableSize] != 4096 {
		t.Fatalf("settings %v", s)
	}
	if int64(fs[1].incr)+defaultWindow < int64(s[http2.SettingInitialWindowSize]) {
		t.Fatalf("connection window %d", fs[1].incr)
	}
	must(t, p.fr.WriteSettingsAck())
	p.pump()
	p.expect()
	// Large frames go out once allowed.
	p.unary(1, "/test.Echo/Unary", nil)
	p.pump()
	p.out = p.c.Answer(p.out, 1, make([]byte, 40000))
	fs = p.expect("HEADERS", "DATA", "HEADERS")
	if len(fs[1].data) != 40005 {
		t.Fatalf("DATA of %d", len(fs[1].data))
	}
}

func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(p *peer)
		code http2.ErrCode
	}{
		{"enable push 2", func(p *peer) { p.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 2}) }, http2.ErrCodeProtocol},
		{"window too large", func(p *peer) {
			p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, http2.ErrCodeFlowControl},
		{"frame size small", func(p *peer) { p.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16383}) }, http2.ErrCodeProtocol},
		{"frame size large", func(p *peer) { p.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 24}) }, http2.ErrCodeProtocol},
		{"length", func(p *peer) { p.raw(http2.FrameSettings, 0, 0, make([]byte, 7)) }, http2.ErrCodeFrameSize},
		{"ack with payload", func(p *peer) { p.raw(http2.FrameSettings, http2.FlagSettingsAck, 0, make([]byte, 6)) }, http2.ErrCodeFrameSize},
		{"on a stream", func(p *peer) { p.raw(http2.FrameSettings, 0, 1, nil) }, http2.ErrCodeProtocol},
		{"connect protocol 2", func(p *peer) { p.fr.WriteSettings(http2.Setting{ID: 8, Val: 2}) }, http2.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, testConfig())
			p.handshake()
			tc.send(p)
			p.goaway(tc.code)
		})
	}
}

func TestConnectionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(p *peer)
		code http2.ErrCode
	}{
		{"frame too large", func(p *peer) { p.raw(http2.FrameData, 0, 1, make([]byte, MaxFrameBytes+1)) }, http2.ErrCodeFrameSize},
		{"unknown frame too large", func(p *peer) { p.raw(0x77, 0, 0, make([]byte, MaxFrameBytes+1)) }, http2.ErrCodeFrameSize},
		{"data on stream 0", func(p *peer) { p.raw(http2.FrameData, 0, 0, []byte{1}) }, http2.ErrCodeProtocol},
		{"data on an idle stream", func(p *peer) { p.data(5, false, []byte{1}) }, http2.ErrCodeProtocol},
		{"data on an even stream", func(p *peer) { p.unary(1, "/x/y", nil); p.data(2, false, []byte{1}) }, http2.ErrCodeProtocol},
		{"headers on stream 0", func(p *peer) { p.headers(0, true, requestFields("/x/y")...) }, http2.ErrCodeProtocol},
		{"headers on an even stream", func(p *peer) { p.headers(2, true, requestFields("/x/y")...) }, http2.ErrCodeProtocol},
		{"decreasing stream id", func(p *peer) {
			p.headers(5, true, requestFields("/x/y")...)
			p.headers(3, true, requestFields("/x/y")...)
		}, http2.ErrCodeProtocol},
		{"reused stream id", func(p *peer) {
			p.headers(1, true, requestFields("/x/y")...)
			p.pump()
			p.c.Fail(nil, 1, 1, "")
			p.headers(1, true, requestFields("/x/y")...)
		}, http2.ErrCodeProtocol},
		{"push promise", func(p *peer) {
			p.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: p.block(":path", "/"), EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"continuation alone", func(p *peer) { p.fr.WriteContinuation(1, true, p.block(":path", "/")) }, http2.ErrCodeProtocol},
		{"interleaved header block", func(p *peer) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.block(requestFields("/x/y")...)})
			p.fr.WritePing(false, [8]byte{})
		}, http2.ErrCodeProtocol},
		{"continuation on another stream", func(p *peer) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.block(requestFields("/x/y")...)})
			p.fr.WriteContinuation(3, true, nil)
		}, http2.ErrCodeProtocol},
		{"ping on a stream", func(p *peer) { p.raw(http2.FramePing, 0, 1, make([]byte, 8)) }, http2.ErrCodeProtocol},
		{"ping length", func(p *peer) { p.raw(http2.FramePing, 0, 0, make([]byte, 7)) }, http2.ErrCodeFrameSize},
		{"goaway on a stream", func(p *peer) { p.raw(http2.FrameGoAway, 0, 1, make([]byte, 8)) }, http2.ErrCodeProtocol},
		{"goaway length", func(p *peer) { p.raw(http2.FrameGoAway, 0, 0, make([]byte, 7)) }, http2.ErrCodeFrameSize},
		{"window update 0", func(p *peer) { p.fr.WriteWindowUpdate(0, 0) }, http2.ErrCodeProtocol},
		{"window overflow", func(p *peer) { p.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		{"window update length", func(p *peer) { p.raw(http2.FrameWindowUpdate, 0, 0, make([]byte, 3)) }, http2.ErrCodeFrameSize},
		{"window update on an idle stream", func(p *peer) { p.fr.WriteWindowUpdate(3, 1) }, http2.ErrCodeProtocol},
		{"rst on stream 0", func(p *peer) { p.raw(http2.FrameRSTStream, 0, 0, make([]byte, 4)) }, http2.ErrCodeProtocol},
		{"rst on an idle stream", func(p *peer) { p.fr.WriteRSTStream(1, http2.ErrCodeCancel) }, http2.ErrCodeProtocol},
		{"rst length", func(p *peer) { p.unary(1, "/x/y", nil); p.raw(http2.FrameRSTStream, 0, 1, make([]byte, 3)) }, http2.ErrCodeFrameSize},
		{"priority on stream 0", func(p *peer) { p.raw(http2.FramePriority, 0, 0, make([]byte, 5)) }, http2.ErrCodeProtocol},
		{"bad hpack", func(p *peer) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, testConfig())
			p.handshake()
			tc.send(p)
			p.goaway(tc.code)
			// Closed for good.
			if n, out, ev := p.c.Step([]byte("more"), nil); n != 0 || len(out) != 0 || ev != Closing {
				t.Fatal("Step after Closing")
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(p *peer)
		want string
	}{
		{"priority self-dependency", func(p *peer) { p.fr.WritePriority(3, http2.PriorityParam{StreamDep: 3}) }, "RST_STREAM(PROTOCOL_ERROR)"},
		{"priority length", func(p *peer) { p.raw(http2.FramePriority, 0, 3, make([]byte, 4)) }, "RST_STREAM(FRAME_SIZE_ERROR)"},
		{"headers self-dependency", func(p *peer) {
			p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: p.block(requestFields("/x/y")...),
				EndHeaders: true, Priority: http2.PriorityParam{StreamDep: 3}})
		}, "RST_STREAM(PROTOCOL_ERROR)"},
		{"window update 0 on a stream", func(p *peer) { p.request(3, "/x/y"); p.fr.WriteWindowUpdate(3, 0) }, "RST_STREAM(PROTOCOL_ERROR)"},
		{"window update overflow on a stream", func(p *peer) { p.request(3, "/x/y"); p.fr.WriteWindowUpdate(3, 1<<31-1) }, "RST_STREAM(FLOW_CONTROL_ERROR)"},
		{"data after end", func(p *peer) { p.headers(3, true, requestFields("/x/y")...); p.data(3, false, []byte{0}) }, "RST_STREAM(STREAM_CLOSED)"},
		{"data on a closed stream", func(p *peer) { p.data(1, false, []byte{0}) }, "RST_STREAM(STREAM_CLOSED)"},
		{"stream window exceeded", func(p *peer) {
			p.request(3, "/x/y")
			p.data(3, false, grpcMessage(make([]byte, 64<<10))[:16384])
			for range 4 {
				p.data(3, false, make([]byte, 16384)) // 5 × 16384 > 64 KiB + 5
			}
		}, "RST_STREAM(FLOW_CONTROL_ERROR)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, testConfig())
			p.handshake()
			p.unary(1, "/test.Echo/Unary", nil)
			p.pump()
			p.out = p.c.Answer(p.out, 1, nil)
			p.frames()
			tc.send(p)
			p.pump()
			fs := p.frames()
			if len(fs) == 0 || fs[len(fs)-1].String() != tc.want || p.closed {
				t.Fatalf("frames %v, closed %v; want %s", fs, p.closed, tc.want)
			}
			if p.c.Live(3) {
				t.Fatal("stream 3 live")
			}
		})
	}
}

func TestUnknownFrameIgnored(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.raw(0x42, 0xff, 0, []byte("whatever"))
	p.raw(0x42, 0, 7, nil)
	p.unary(1, "/test.Echo/Unary", nil)
	if evs := p.pump(); len(evs) != 1 || p.closed {
		t.Fatalf("events %v", evs)
	}
}

func TestPreface(t *testing.T) {
	c := NewConn(testConfig())
	c.Start(nil)
	// Byte by byte is fine.
	in := []byte(clientPreface)
	for i := range in {
		n, _, ev := c.Step(in[i:i+1], nil)
		if n != 1 || ev != NeedMore {
			t.Fatalf("byte %d: n %d ev %v", i, n, ev)
		}
	}
	// The first frame must be SETTINGS.
	n, out, ev := c.Step(appendFrameHeader(nil, 8, framePing, 0, 0), nil)
	if n != 0 || ev != NeedMore {
		t.Fatal("partial frame consumed")
	}
	_, out, ev = c.Step(append(appendFrameHeader(nil, 8, framePing, 0, 0), make([]byte, 8)...), out)
	if ev != Closing || len(out) != 17 || out[3] != frameGoAway {
		t.Fatalf("ev %v out %x", ev, out)
	}

	// HTTP/1.1 is closed at once, with no GOAWAY.
	c = NewConn(testConfig())
	c.Start(nil)
	_, out, ev = c.Step([]byte("GET / HTTP/1.1\r\n"), nil)
	if ev != Closing || len(out) != 0 {
		t.Fatalf("ev %v out %x", ev, out)
	}
}

func TestRefusedStream(t *testing.T) {
	cfg := testConfig()
	cfg.MaxStreams = 2
	p := newPeer(t, cfg)
	p.handshake()
	p.unary(1, "/test.Echo/Hold", nil)
	p.unary(3, "/test.Echo/Hold", nil)
	p.unary(5, "/test.Echo/Hold", nil)
	if evs := p.pump(); len(evs) != 2 {
		t.Fatalf("events %v", evs)
	}
	p.expect("RST_STREAM(REFUSED_STREAM)")
	p.out = p.c.Answer(p.out, 3, nil)
	p.unary(7, "/test.Echo/Hold", nil)
	if evs := p.pump(); len(evs) != 1 || evs[0].req.Stream != 7 {
		t.Fatalf("events %v", evs)
	}
}

// TestRapidReset: streams the client resets while the loop holds them
// still count until answered, so resets cannot raise the work in flight.
func TestRapidReset(t *testing.T) {
	cfg := testConfig()
	cfg.MaxStreams = 4
	p := newPeer(t, cfg)
	p.handshake()
	for id := uint32(1); id < 2*1000; id += 2 {
		p.unary(id, "/test.Echo/Hold", nil)
		must(t, p.fr.WriteRSTStream(id, http2.ErrCodeCancel))
	}
	evs := p.pump()
	if len(evs) != 4 || p.c.Streams() != 4 {
		t.Fatalf("%d events, %d streams", len(evs), p.c.Streams())
	}
	refused := 0
	for _, f := range p.frames() {
		if f.typ == frameRSTStream && f.code == errCodeRefusedStream {
			refused++
		} else {
			t.Fatalf("frame %v", f)
		}
	}
	if refused != 996 {
		t.Fatalf("%d refused", refused)
	}
	for _, e := range evs {
		if p.c.Live(e.req.Stream) {
			t.Fatal("reset stream live")
		}
		if out := p.c.Answer(nil, e.req.Stream, []byte("late")); len(out) != 0 {
			t.Fatal("answer to a reset stream written")
		}
	}
	if p.c.Streams() != 0 {
		t.Fatal("streams left")
	}
	// Reset before any event: nothing is owed, the slot frees at once.
	p.request(2001, "/test.Echo/Hold")
	must(t, p.fr.WriteRSTStream(2001, http2.ErrCodeCancel))
	if evs := p.pump(); len(evs) != 0 || p.c.Streams() != 0 {
		t.Fatal("stream kept")
	}
}

// TestContinuationFlood: a header block that never ends is cut off at the
// bound, whether its fragments carry bytes or not.
func TestContinuationFlood(t *testing.T) {
	for _, size := range []int{1000, 0} {
		p := newPeer(t, testConfig())
		p.handshake()
		must(t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.block(requestFields("/x/y")...)}))
		sent := 0
		for !p.closed && sent < 10*p.c.blockLimit {
			must(t, p.fr.WriteContinuation(1, false, make([]byte, size)))
			sent += frameHeaderLen + size
			p.pump()
		}
		if !p.closed || sent > p.c.blockLimit+MaxFrameBytes {
			t.Fatalf("size %d: closed %v after %d bytes", size, p.closed, sent)
		}
		fs := p.frames()
		if f := fs[len(fs)-1]; f.typ != frameGoAway || f.code != errCodeEnhanceYourCalm {
			t.Fatalf("frames %v", fs)
		}
	}
}

func TestContinuation(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	blk := p.block(requestFields("/test.Echo/Unary", "x-big", strings.Repeat("v", 3000))...)
	must(t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:10], EndStream: true}))
	must(t, p.fr.WriteContinuation(1, false, blk[10:1000]))
	must(t, p.fr.WriteContinuation(1, true, blk[1000:]))
	evs := p.pump()
	if len(evs) != 1 || evs[0].ev != HalfClosed || evs[0].req.Method != 0 {
		t.Fatalf("events %v", evs)
	}
}

func TestHeaderListTooLarge(t *testing.T) {
	cfg := testConfig()
	cfg.MaxHeaderListBytes = 1024
	p := newPeer(t, cfg)
	p.handshake()
	blk := p.block(requestFields("/test.Echo/Unary", "x-big", strings.Repeat("v", 1200))...)
	must(t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:500]}))
	must(t, p.fr.WriteContinuation(1, true, blk[500:]))
	p.pump()
	fs := p.expect("HEADERS", "RST_STREAM(NO_ERROR)")
	if fs[0].fields[":status"] != "431" || fs[0].fields["grpc-status"] != "8" {
		t.Fatalf("fields %v", fs[0].fields)
	}
	// The table stayed in step: the next request, encoded against it, is fine.
	p.unary(3, "/test.Echo/Unary", nil)
	if evs := p.pump(); len(evs) != 1 {
		t.Fatalf("events %v", evs)
	}
}

// TestFlowControlHoldback: a client with a tiny window gets the answer
// only as it opens the window.
func TestFlowControlHoldback(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	p.unary(1, "/test.Echo/Unary", nil)
	p.pump()
	msg := bytes.Repeat([]byte("x"), 100)
	p.out = p.c.Answer(p.out, 1, msg)
	fs := p.expect("HEADERS", "DATA")
	if len(fs[1].data) != 10 || p.c.Pending() != 95 || p.c.Streams() != 1 {
		t.Fatalf("data %d, pending %d", len(fs[1].data), p.c.Pending())
	}
	if p.c.blockedq.head >= 0 {
		t.Fatal("a stream held back by its own window waits for the connection's")
	}
	if p.c.Live(1) {
		t.Fatal("answered stream live")
	}
	must(t, p.fr.WriteWindowUpdate(1, 50))
	p.pump()
	fs = p.expect("DATA")
	if len(fs[0].data) != 50 || p.c.Pending() != 45 {
		t.Fatalf("data %d, pending %d", len(fs[0].data), p.c.Pending())
	}
	// Raising the initial window releases the rest, then the trailers.
	must(t, p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000}))
	p.pump()
	fs = p.expect("SETTINGS", "DATA", "HEADERS")
	if len(fs[1].data) != 45 || fs[2].fields["grpc-status"] != "0" || p.c.Pending() != 0 || p.c.Streams() != 0 {
		t.Fatalf("data %d, pending %d, streams %d", len(fs[1].data), p.c.Pending(), p.c.Streams())
	}
}

func TestFlowControlConnectionWindow(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	for id := uint32(1); id <= 5; id += 2 {
		p.unary(id, "/test.Echo/Unary", nil)
	}
	p.pump()
	big := make([]byte, 40000)
	for id := uint32(1); id <= 5; id += 2 {
		p.out = p.c.Answer(p.out, id, big)
	}
	// 65535 of connection window: stream 1 whole, stream 3 in part.
	var sent int
	for _, f := range p.frames() {
		sent += len(f.data)
	}
	if sent != defaultWindow || p.c.Pending() != 3*40005-defaultWindow || p.c.Streams() != 2 {
		t.Fatalf("sent %d, pending %d, streams %d", sent, p.c.Pending(), p.c.Streams())
	}
	must(t, p.fr.WriteWindowUpdate(0, 1<<20))
	p.pump()
	for _, f := range p.frames() {
		sent += len(f.data)
	}
	if sent != 3*40005 || p.c.Pending() != 0 || p.c.Streams() != 0 {
		t.Fatalf("sent %d, pending %d, streams %d", sent, p.c.Pending(), p.c.Streams())
	}
}

func TestNegativeWindow(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
	p.unary(1, "/test.Echo/Unary", nil)
	p.pump()
	p.out = p.c.Answer(p.out, 1, make([]byte, 200))
	p.frames()
	must(t, p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}))
	must(t, p.fr.WriteWindowUpdate(1, 100))
	p.pump()
	p.expect("SETTINGS") // the window is at 0 again: -100 + 100
	must(t, p.fr.WriteWindowUpdate(1, 105))
	p.pump()
	p.expect("DATA", "HEADERS")
}

func TestHeldBound(t *testing.T) {
	cfg := testConfig()
	cfg.MaxHeldBytes = 1000
	p := newPeer(t, cfg)
	p.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	p.unary(1, "/test.Echo/Stream", nil)
	p.pump()
	p.out = p.c.Send(p.out, 1, make([]byte, 900))
	p.expect("HEADERS")
	p.out = p.c.Send(p.out, 1, make([]byte, 900))
	p.expect("RST_STREAM(INTERNAL_ERROR)")
	if p.c.Pending() != 0 || p.c.Live(1) || p.c.Streams() != 1 {
		t.Fatal("held bytes kept")
	}
	p.out = p.c.Finish(p.out, 1, 0, "")
	p.expect()
	if p.c.Streams() != 0 {
		t.Fatal("stream kept")
	}
}

func TestClientResetDropsHeld(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	p.unary(1, "/test.Echo/Unary", nil)
	p.pump()
	p.out = p.c.Answer(p.out, 1, make([]byte, 100))
	p.expect("HEADERS")
	must(t, p.fr.WriteRSTStream(1, http2.ErrCodeCancel))
	p.pump()
	if p.c.Pending() != 0 || p.c.Streams() != 0 {
		t.Fatal("held bytes kept")
	}
}

// TestServerGoAway: a drain's first GOAWAY names the largest stream id
// and comes with a PING; a stream the client opened before reading it is
// taken. The PING's ACK brings the final GOAWAY, naming the last stream
// seen; a stream opened after it is refused, and the connection closes
// once its streams are answered.
func TestServerGoAway(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.unary(1, "/test.Echo/Hold", nil)
	p.unary(3, "/test.Echo/Hold", nil)
	p.pump()
	p.out = p.c.GoAway(p.out)
	fs := p.expect("GOAWAY(NO_ERROR)", "PING")
	if fs[0].last != 1<<31-1 || fs[1].flags&flagAck != 0 || p.c.Refusing() {
		t.Fatalf("first GOAWAY names %d; PING flags %x; refusing %v", fs[0].last, fs[1].flags, p.c.Refusing())
	}
	p.unary(5, "/test.Echo/Hold", nil) // sent before the client read the GOAWAY
	if evs := p.pump(); len(evs) != 1 || p.closed {
		t.Fatalf("a stream racing the first GOAWAY: %v, closed %v", evs, p.closed)
	}
	must(t, p.fr.WritePing(true, [8]byte(fs[1].data)))
	p.pump()
	if fs := p.expect("GOAWAY(NO_ERROR)"); fs[0].last != 5 || !p.c.Refusing() {
		t.Fatalf("final GOAWAY names %d", fs[0].last)
	}
	p.unary(7, "/test.Echo/Hold", nil)
	if evs := p.pump(); len(evs) != 0 || p.closed {
		t.Fatal("a stream after the final GOAWAY was taken")
	}
	p.expect("RST_STREAM(REFUSED_STREAM)")
	for _, id := range []uint32{1, 3} {
		p.out = p.c.Answer(p.out, id, nil)
		p.pump()
		if p.closed {
			t.Fatal("closed with a stream left")
		}
	}
	p.out = p.c.Answer(p.out, 5, nil)
	p.pump()
	if !p.closed {
		t.Fatal("not closed once drained")
	}
	p.expect("HEADERS", "DATA", "HEADERS", "HEADERS", "DATA", "HEADERS", "HEADERS", "DATA", "HEADERS")
}

// TestServerGoAwayWithoutAnAck: a client that never answers the drain's
// PING gets the final GOAWAY on GoAway's second call; an idle connection
// then closes. A PING ACK of another payload changes nothing.
func TestServerGoAwayWithoutAnAck(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.out = p.c.GoAway(p.out)
	p.expect("GOAWAY(NO_ERROR)", "PING")
	must(t, p.fr.WritePing(true, [8]byte{1, 2, 3}))
	p.pump()
	if p.closed || p.c.Refusing() {
		t.Fatal("an ACK of another PING ended the drain's first step")
	}
	p.out = p.c.GoAway(p.out)
	p.pump()
	if fs := p.expect("GOAWAY(NO_ERROR)"); fs[0].last != 0 || !p.closed {
		t.Fatalf("final GOAWAY names %d; closed %v", fs[0].last, p.closed)
	}
	if out := p.c.GoAway(nil); len(out) != 0 {
		t.Fatal("a third GoAway wrote")
	}
}

func TestClientGoAway(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.unary(1, "/test.Echo/Hold", nil)
	must(t, p.fr.WriteGoAway(0, http2.ErrCodeNo, nil))
	p.pump()
	if p.closed {
		t.Fatal("closed with a stream in flight")
	}
	p.out = p.c.Answer(p.out, 1, nil)
	p.pump()
	if !p.closed {
		t.Fatal("not closed")
	}
	p.expect("HEADERS", "DATA", "HEADERS", "GOAWAY(NO_ERROR)")
}

func TestWindowUpdatesForStreams(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMessageBytes = 100 << 10
	p := newPeer(t, cfg)
	p.handshake()
	p.request(1, "/test.Echo/Stream")
	// Messages of 60000: after each one the rest of the window could not
	// carry another whole, so credit comes back at once.
	wire := grpcMessage(make([]byte, 60000))
	got := 0
	var updates uint32
	for range 10 {
		for b := wire; len(b) > 0; {
			n := min(len(b), 16384)
			p.data(1, false, b[:n])
			b = b[n:]
		}
		got += len(p.pump())
		for _, f := range p.frames() {
			if f.typ == frameWindowUpdate && f.id == 1 {
				updates += f.incr
			}
		}
	}
	if got != 10 || updates != 10*60005 {
		t.Fatalf("%d messages, %d credited", got, updates)
	}
}

func TestReset(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.unary(1, "/test.Echo/Hold", []byte("x"))
	p.request(3, "/test.Echo/Hold")
	p.data(3, false, grpcMessage(make([]byte, 20000))[:10000])
	p.pump()
	p.c.Reset()
	if p.c.Streams() != 0 || p.c.Pending() != 0 {
		t.Fatal("state kept")
	}
	p2 := newPeerWith(t, p.c)
	p2.handshake()
	p2.unary(1, "/test.Echo/Unary", nil)
	if evs := p2.pump(); len(evs) != 1 {
		t.Fatalf("events %v", evs)
	}
	p2.checkInvariants()
}

func newPeerWith(t testing.TB, c *Conn) *peer {
	p := newPeer(t, testConfig())
	p.c = c
	p.out = c.Start(nil)
	return p
}

func TestConfigValidate(t *testing.T) {
	good := testConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mod := range []func(c *Config){
		func(c *Config) { c.MaxStreams = 0 },
		func(c *Config) { c.MaxStreams = MaxStreamsLimit + 1 },
		func(c *Config) { c.MaxMessageBytes = 0 },
		func(c *Config) { c.MaxMessageBytes = MaxMessageLimit + 1 },
		func(c *Config) { c.MaxHeaderListBytes = 10 },
		func(c *Config) { c.HeaderTableBytes = 1 << 20 },
		func(c *Config) { c.MaxHeldBytes = -1 },
		func(c *Config) { c.Methods = []string{"x"} },
		func(c *Config) { c.Methods = []string{"/a", "/a"} },
		func(c *Config) { c.MaxStreams, c.MaxMessageBytes = 1024, 16<<20 },
	} {
		c := *testConfig()
		mod(&c)
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestIndex(t *testing.T) {
	cfg := testConfig()
	cfg.MaxStreams = 64
	c := NewConn(cfg)
	// Fill and empty the table in orders that wrap around the index.
	live := map[uint32]int32{}
	id := uint32(1)
	for round := range 2000 {
		if len(live) < 64 && (round%3 != 0 || len(live) == 0) {
			live[id] = c.newStream(id)
			id += 2
		} else {
			for k, i := range live {
				c.streams[i].reset = true
				c.maybeFree(i)
				delete(live, k)
				break
			}
		}
		for k, i := range live {
			if c.lookup(k) != i {
				t.Fatalf("round %d: %d not found", round, k)
			}
		}
		if err := c.check(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestZeroCopy: a message whole in one DATA frame aliases the input.
func TestZeroCopy(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.unary(1, "/test.Echo/Unary", []byte("in place"))
	in := append(p.in, p.w.Bytes()...)
	p.w.Reset()
	var msg []byte
	for len(in) > 0 {
		n, out, ev := p.c.Step(in, nil)
		if ev == Message {
			msg = p.c.Request().Message
			in = in[n:]
			break
		}
		in, p.out = in[n:], out
	}
	end := unsafe.Pointer(unsafe.SliceData(in))
	start := unsafe.Add(end, -64)
	at := unsafe.Pointer(unsafe.SliceData(msg))
	if string(msg) != "in place" || uintptr(at) < uintptr(start) || uintptr(at) >= uintptr(end) {
		t.Fatal("message copied")
	}
}

func TestSettingsWindowOverflow(t *testing.T) {
	p := newPeer(t, testConfig())
	p.handshake()
	p.request(1, "/test.Echo/Unary")
	must(t, p.fr.WriteWindowUpdate(1, 1<<31-1-defaultWindow-10))
	must(t, p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: defaultWindow + 10}))
	p.pump()
	if p.closed {
		t.Fatal("closed at the largest window")
	}
	must(t, p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: defaultWindow + 11}))
	p.goaway(http2.ErrCodeFlowControl)
}

// TestLargeHeaderTable: a table larger than the default, which the client
// takes up with a size update.
func TestLargeHeaderTable(t *testing.T) {
	cfg := testConfig()
	cfg.HeaderTableBytes = 65536
	p := newPeer(t, cfg)
	fs := p.handshake()
	if fs[0].setting[http2.SettingHeaderTableSize] != 65536 {
		t.Fatalf("settings %v", fs[0].setting)
	}
	p.enc.SetMaxDynamicTableSizeLimit(65536)
	p.enc.SetMaxDynamicTableSize(65536)
	for id := uint32(1); id < 400; id += 4 {
		p.unary(id, "/test.Echo/Unary", nil)
		p.headers(id+2, true, requestFields("/test.Echo/Unary", fmt.Sprintf("x-%d", id), strings.Repeat("v", 500))...)
		evs := p.pump()
		if len(evs) != 2 {
			t.Fatalf("stream %d: events %v", id, evs)
		}
		for _, e := range evs {
			p.out = p.c.Fail(p.out, e.req.Stream, 1, "")
		}
	}
}
