package h2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"golang.org/x/net/http2"
	xhpack "golang.org/x/net/http2/hpack"
)

// peer drives a Conn in memory with golang.org/x/net/http2's Framer and
// HPACK encoder as the client, which may be made to misbehave.
type peer struct {
	t      testing.TB
	c      *Conn
	w      bytes.Buffer // client bytes not yet given to the Conn
	fr     *http2.Framer
	enc    *xhpack.Encoder
	encBuf bytes.Buffer
	in     []byte // client bytes given to the Conn, not consumed
	out    []byte // server bytes not yet read as frames
	dec    *xhpack.Decoder
	closed bool
	events []event
}

// event is a copy of an event Step returned.
type event struct {
	ev  Event
	req Request
}

var testMethods = []string{"/test.Echo/Unary", "/test.Echo/Hold", "/test.Echo/Fail", "/test.Echo/Stream"}

func testConfig() *Config {
	return &Config{
		Methods:            testMethods,
		MaxStreams:         8,
		MaxMessageBytes:    64 << 10,
		MaxHeaderListBytes: 8 << 10,
	}
}

func newPeer(t testing.TB, cfg *Config) *peer {
	p := &peer{t: t, c: NewConn(cfg)}
	p.fr = http2.NewFramer(&p.w, nil)
	p.fr.AllowIllegalWrites = true
	p.enc = xhpack.NewEncoder(&p.encBuf)
	p.dec = xhpack.NewDecoder(4096, nil)
	p.out = p.c.Start(nil)
	return p
}

// handshake sends the preface and an empty SETTINGS, and checks the
// server's SETTINGS, WINDOW_UPDATE and SETTINGS ACK.
func (p *peer) handshake(settings ...http2.Setting) []frame {
	p.t.Helper()
	p.w.WriteString(clientPreface)
	must(p.t, p.fr.WriteSettings(settings...))
	p.pump()
	fs := p.frames()
	if len(fs) != 3 || fs[0].typ != frameSettings || fs[1].typ != frameWindowUpdate ||
		fs[2].typ != frameSettings || fs[2].flags&flagAck == 0 {
		p.t.Fatalf("handshake: got %v", fs)
	}
	return fs
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pump gives the Conn what the client wrote, stepping until NeedMore or
// Closing, and records the events.
func (p *peer) pump() []event {
	p.t.Helper()
	p.in = append(p.in, p.w.Bytes()...)
	p.w.Reset()
	var evs []event
	for !p.closed {
		n, out, ev := p.c.Step(p.in, p.out)
		p.out = out
		p.in = p.in[n:]
		if ev == NeedMore {
			break
		}
		if ev == Closing {
			p.closed = true
		}
		e := event{ev: ev, req: *p.c.Request()}
		e.req.Message = bytes.Clone(e.req.Message)
		evs = append(evs, e)
		p.checkInvariants()
	}
	p.checkInvariants()
	p.events = append(p.events, evs...)
	return evs
}

func (p *peer) checkInvariants() {
	p.t.Helper()
	if err := p.c.check(); err != nil {
		p.t.Fatal(err)
	}
}

// headers encodes fields (name, value pairs) as a header block.
func (p *peer) block(fields ...string) []byte {
	p.encBuf.Reset()
	for i := 0; i < len(fields); i += 2 {
		must(p.t, p.enc.WriteField(xhpack.HeaderField{Name: fields[i], Value: fields[i+1]}))
	}
	return bytes.Clone(p.encBuf.Bytes())
}

func requestFields(path string, extra ...string) []string {
	return append([]string{
		":method", "POST", ":scheme", "http", ":path", path, ":authority", "test",
		"content-type", "application/grpc", "te", "trailers",
	}, extra...)
}

func (p *peer) headers(id uint32, end bool, fields ...string) {
	must(p.t, p.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: id, BlockFragment: p.block(fields...), EndStream: end, EndHeaders: true,
	}))
}

func (p *peer) request(id uint32, path string, extra ...string) {
	p.headers(id, false, requestFields(path, extra...)...)
}

func grpcMessage(msg []byte) []byte {
	b := make([]byte, prefixLen, prefixLen+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

func (p *peer) data(id uint32, end bool, b []byte) {
	must(p.t, p.fr.WriteData(id, end, b))
}

// unary sends a whole unary request.
func (p *peer) unary(id uint32, path string, msg []byte) {
	p.request(id, path)
	p.data(id, true, grpcMessage(msg))
}

func (p *peer) raw(typ http2.FrameType, flags http2.Flags, id uint32, payload []byte) {
	must(p.t, p.fr.WriteRawFrame(typ, flags, id, payload))
}

// frame is a server frame as the client reads it.
type frame struct {
	typ     uint8
	flags   uint8
	id      uint32
	code    uint32            // RST_STREAM, GOAWAY
	last    uint32            // GOAWAY
	incr    uint32            // WINDOW_UPDATE
	data    []byte            // DATA, PING
	fields  map[string]string // HEADERS
	setting map[http2.SettingID]uint32
}

func (f frame) String() string {
	name := http2.FrameType(f.typ).String()
	switch f.typ {
	case frameRSTStream:
		return name + "(" + http2.ErrCode(f.code).String() + ")"
	case frameGoAway:
		return name + "(" + http2.ErrCode(f.code).String() + ")"
	}
	return name
}

// frames reads what the server wrote since the last call.
func (p *peer) frames() []frame {
	p.t.Helper()
	r := bytes.NewReader(p.out)
	fr := http2.NewFramer(io.Discard, r)
	fr.SetMaxReadFrameSize(1<<24 - 1)
	var fs []frame
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.t.Fatalf("reading the server's frames: %v", err)
		}
		h := f.Header()
		x := frame{typ: uint8(h.Type), flags: uint8(h.Flags), id: h.StreamID}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			x.code = uint32(f.ErrCode)
		case *http2.GoAwayFrame:
			x.code, x.last = uint32(f.ErrCode), f.LastStreamID
		case *http2.WindowUpdateFrame:
			x.incr = f.Increment
		case *http2.DataFrame:
			x.data = bytes.Clone(f.Data())
		case *http2.PingFrame:
			x.data = bytes.Clone(f.Data[:])
		case *http2.SettingsFrame:
			x.setting = map[http2.SettingID]uint32{}
			must(p.t, f.ForeachSetting(func(s http2.Setting) error {
				x.setting[s.ID] = s.Val
				return nil
			}))
		case *http2.HeadersFrame:
			if !f.HeadersEnded() {
				p.t.Fatal("the server sent a CONTINUATION")
			}
			x.fields = map[string]string{}
			hs, err := p.dec.DecodeFull(f.HeaderBlockFragment())
			must(p.t, err)
			for _, hf := range hs {
				if _, dup := x.fields[hf.Name]; dup {
					p.t.Fatalf("field %s twice", hf.Name)
				}
				x.fields[hf.Name] = hf.Value
			}
		}
		fs = append(fs, x)
	}
	p.out = p.out[:0]
	return fs
}

// expect checks the kinds of frames written since the last call, given as
// strings like "HEADERS", "RST_STREAM(PROTOCOL_ERROR)", and returns them.
// WINDOW_UPDATEs are left out.
func (p *peer) expect(want ...string) []frame {
	p.t.Helper()
	var fs []frame
	for _, f := range p.frames() {
		if f.typ != frameWindowUpdate {
			fs = append(fs, f)
		}
	}
	ok := len(fs) == len(want)
	for i := 0; ok && i < len(fs); i++ {
		ok = fs[i].String() == want[i]
	}
	if !ok {
		p.t.Fatalf("frames %v, want %v", fs, want)
	}
	return fs
}

// goaway expects the connection to have ended with a GOAWAY carrying code.
func (p *peer) goaway(code http2.ErrCode) {
	p.t.Helper()
	p.pump()
	fs := p.frames()
	if !p.closed || len(fs) == 0 || fs[len(fs)-1].typ != frameGoAway || fs[len(fs)-1].code != uint32(code) {
		p.t.Fatalf("closed %v, frames %v; want GOAWAY(%v)", p.closed, fs, code)
	}
}
