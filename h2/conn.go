package h2

import (
	"math/bits"

	"github.com/tollgated/tollgated/hpack"
)

// Event is what Step stopped for.
type Event uint8

const (
	// NeedMore: no complete frame is left in the input; read more.
	NeedMore Event = iota
	// Message: Request() is a complete request message on a stream.
	Message
	// HalfClosed: the client ended its side of Request().Stream after
	// the messages already delivered, with no message of its own.
	HalfClosed
	// Closing: the connection ends (a connection error, or drained after
	// a GOAWAY). out ends with the GOAWAY, if one is due; the loop closes
	// the connection after writing out. Every later Step says Closing
	// again and writes nothing.
	Closing
)

func (e Event) String() string {
	switch e {
	case NeedMore:
		return "NeedMore"
	case Message:
		return "Message"
	case HalfClosed:
		return "HalfClosed"
	case Closing:
		return "Closing"
	}
	return "Event(?)"
}

// Request describes the event Step returned: a message, or the end of a
// client's side of a stream.
type Request struct {
	Stream uint32
	Method int // index into Config.Methods, or -1
	// Message is the request message without its prefix (nil for
	// HalfClosed). It aliases Step's input or the stream's own buffer,
	// and is valid until the next Step.
	Message []byte
	// EndStream: the client half-closed with this message (unary), or,
	// for HalfClosed, always.
	EndStream bool
	Timeout   int64 // grpc-timeout in nanoseconds, 0 if none
}

// Conn is the server side of one HTTP/2 connection. It is not safe for
// concurrent use: the loop that owns the connection makes every call.
type Conn struct {
	// Fixed at NewConn.
	cfg        Config
	methods    map[string]int32
	initWin    int64 // our SETTINGS_INITIAL_WINDOW_SIZE
	connWin    int64 // the connection window kept open for the client
	maxWire    int64 // the largest message with its prefix
	blockLimit int   // headerBlockBytes
	maxHeld    int
	respBlock  []byte // the header block of every answer's HEADERS
	dec        *hpack.Decoder
	fields     *hpack.Fields

	// Connection state.
	started     bool
	prefaceLeft int  // preface bytes still to check
	sawSettings bool // the client's first SETTINGS arrived
	dead        bool // Closing was returned
	lastID      uint32
	goawayFirst bool // a drain's first GOAWAY and its PING are out
	goawaySent  bool // the final GOAWAY is out: no new stream is taken
	goawayRecv  bool

	// Flow control. recvWin is what the client may still send on the
	// connection; recvCredit what was read and not yet returned to it.
	// sendWin is the client's connection window for our DATA.
	recvWin, recvCredit int64
	sendWin             int64
	peerInitWin         int64
	peerMaxFrame        int

	// The header block being accumulated from HEADERS and CONTINUATIONs
	// (hb.id != 0 while one is open). hbBuf's capacity is blockLimit.
	hb    blockState
	hbBuf []byte

	// The stream table.
	streams    []stream // MaxStreams slots
	free       []int32  // free slots
	index      []int32  // id -> slot, -1 empty
	indexShift uint8
	count      int
	opened     list // every slot in use
	readyq     list // streams with something to deliver
	blockedq   list // streams whose held bytes wait for the connection window

	pool    [][]byte // spare buffers, capacity 2*MaxStreams
	pooled  int      // their total capacity, at most retainBytes
	pending int      // held answer bytes, all streams

	recent     [recentResets]uint32
	recentNext int

	// The event last returned. delivered is the slot whose message was
	// handed to the loop (-1 if none); deliveredLen how many of its
	// buffered bytes that message occupies (0 if it aliased the input).
	// deferred is a buffer freed while the loop's message still points
	// into it.
	req          Request
	aliased      bool // this frame delivered a message aliasing the input
	delivered    int32
	deliveredID  uint32
	deliveredLen int
	deferred     []byte

	out     []byte // the output being appended to, during a call
	pinned  bool   // see pin
	scratch []byte // a status header block being made
	msgBuf  []byte // a grpc-message being encoded
}

type blockState struct {
	id      uint32
	end     bool // END_STREAM on the HEADERS
	selfDep bool // the HEADERS made the stream depend on itself
	charged int  // frame bytes counted against blockLimit
}

// NewConn makes a connection, allocating everything it will need. It
// panics if cfg does not Validate.
func NewConn(cfg *Config) *Conn {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	c := &Conn{
		cfg:        *cfg,
		methods:    make(map[string]int32, len(cfg.Methods)),
		initWin:    initialWindow(cfg.MaxMessageBytes),
		maxWire:    int64(cfg.MaxMessageBytes) + prefixLen,
		blockLimit: cfg.headerBlockBytes(),
		maxHeld:    cfg.maxHeld(),
		// Until the client acknowledges our SETTINGS its encoder may use
		// the default 4096-byte table. A decoder table at least as large
		// as the encoder's stays in step (it only keeps entries longer),
		// while a smaller one would evict entries still referred to.
		dec:     hpack.NewDecoder(max(cfg.headerTableBytes(), 4096)),
		fields:  hpack.NewFields(cfg.MaxHeaderListBytes),
		streams: make([]stream, cfg.MaxStreams),
		free:    make([]int32, 0, cfg.MaxStreams),
		pool:    make([][]byte, 0, 2*cfg.MaxStreams),
		scratch: make([]byte, 0, statusBlockBytes),
		msgBuf:  make([]byte, 0, 3*MaxStatusMessageBytes),
	}
	c.cfg.Methods = append([]string(nil), cfg.Methods...)
	for i, m := range c.cfg.Methods {
		c.methods[m] = int32(i)
	}
	c.connWin = connWindow(c.initWin)
	c.hbBuf = make([]byte, 0, c.blockLimit)
	b := bits.Len(uint(2*cfg.MaxStreams - 1))
	c.index = make([]int32, 1<<b)
	c.indexShift = uint8(32 - b)
	c.respBlock = hpack.AppendIndexed(nil, hpack.StaticStatus200)
	c.respBlock = hpack.AppendLiteralIndexedName(c.respBlock, hpack.StaticContentType, "application/grpc")
	c.opened.at, c.readyq.at, c.blockedq.at = openLinks, readyLinks, blockedLinks
	c.Reset()
	return c
}

// Reset readies c for another connection; it allocates nothing.
func (c *Conn) Reset() {
	for i := range c.streams {
		s := &c.streams[i]
		if s.buf != nil {
			c.putBuf(s.buf)
		}
		if s.held != nil {
			c.putBuf(s.held)
		}
		*s = stream{}
	}
	if c.deferred != nil {
		c.putBuf(c.deferred)
	}
	c.free = c.free[:0]
	for i := len(c.streams) - 1; i >= 0; i-- {
		c.free = append(c.free, int32(i))
	}
	for j := range c.index {
		c.index[j] = -1
	}
	c.dec.Reset()
	*c = Conn{
		cfg: c.cfg, methods: c.methods, initWin: c.initWin, connWin: c.connWin,
		maxWire: c.maxWire, blockLimit: c.blockLimit, maxHeld: c.maxHeld,
		respBlock: c.respBlock, dec: c.dec, fields: c.fields,
		hbBuf: c.hbBuf[:0], streams: c.streams, free: c.free, index: c.index,
		indexShift: c.indexShift, pool: c.pool, pooled: c.pooled,
		scratch: c.scratch[:0], msgBuf: c.msgBuf[:0],

		prefaceLeft:  len(clientPreface),
		recvWin:      defaultWindow,
		sendWin:      defaultWindow,
		peerInitWin:  defaultWindow,
		peerMaxFrame: MaxFrameBytes,
		opened:       list{head: -1, tail: -1, at: openLinks},
		readyq:       list{head: -1, tail: -1, at: readyLinks},
		blockedq:     list{head: -1, tail: -1, at: blockedLinks},
		delivered:    -1,
	}
}

// Start appends the server's connection preface to out: its SETTINGS and
// a WINDOW_UPDATE opening the connection window. The loop calls it once,
// at accept, before any Step.
func (c *Conn) Start(out []byte) []byte {
	if c.started {
		panic("h2: BUG Start called twice")
	}
	c.started = true
	out = appendFrameHeader(out, 4*6, frameSettings, 0, 0)
	out = appendSetting(out, settingHeaderTableSize, c.cfg.headerTableBytes())
	out = appendSetting(out, settingMaxConcurrentStreams, c.cfg.MaxStreams)
	out = appendSetting(out, settingInitialWindowSize, uint32(c.initWin))
	out = appendSetting(out, settingMaxHeaderListSize, uint32(c.cfg.MaxHeaderListBytes))
	c.recvWin = c.connWin
	return appendWindowUpdate(out, 0, c.connWin-defaultWindow)
}

// Request returns the request of the event Step last returned.
func (c *Conn) Request() *Request { return &c.req }

// Streams returns the streams counted against MaxStreams now.
func (c *Conn) Streams() int { return c.count }

// Pending returns the answer bytes held back by flow control.
func (c *Conn) Pending() int { return c.pending }

// Live reports whether stream id still waits for (more of) its answer:
// false once it was answered, failed or reset (by either side), and for a
// stream the connection does not know.
func (c *Conn) Live(id uint32) bool {
	if c.dead || id == 0 {
		return false
	}
	i := c.lookup(id)
	return i >= 0 && c.streams[i].live()
}

// GoAway drains the connection gracefully, in two steps (§6.8). Its first
// call appends GOAWAY(NO_ERROR) naming the largest stream id, so that the
// client opens no more streams here, and a PING: streams the client sent
// before it read the GOAWAY are still taken, not refused (a gateway that
// fails closed would deny the request behind a refused call). When the
// PING's ACK comes back, the final GOAWAY names the last stream seen and
// later streams are refused; a second call sends it at once, for a client
// that never answers. Once no stream is left after the final GOAWAY, Step
// returns Closing (the loop may call Step with no input to learn it after
// answering the last one).
func (c *Conn) GoAway(out []byte) []byte {
	switch {
	case c.dead || c.goawaySent:
		return out
	case !c.goawayFirst:
		c.goawayFirst = true
		out = appendGoAway(out, maxStreamID, errCodeNo)
		out = appendFrameHeader(out, 8, framePing, 0, 0)
		return append(out, drainPing...)
	default:
		return c.finalGoAway(out)
	}
}

// Refusing reports whether the final GOAWAY is out: the connection takes
// no new stream and closes once its streams are done.
func (c *Conn) Refusing() bool { return c.goawaySent || c.dead }

func (c *Conn) finalGoAway(out []byte) []byte {
	c.goawaySent = true
	return appendGoAway(out, c.lastID, errCodeNo)
}

// Step consumes whole frames from in until an event, appending to out
// what the server must send, and returns how many bytes it consumed. The
// loop calls it again with in[n:] until NeedMore; a partial frame stays
// unconsumed. Bytes consumed may still be referred to by Request().Message
// until the next Step.
func (c *Conn) Step(in, out []byte) (n int, outNew []byte, ev Event) {
	if !c.started {
		panic("h2: BUG Step before Start")
	}
	if c.dead {
		return 0, out, Closing
	}
	c.out = out
	c.release()
	if ev := c.deliverReady(); ev != NeedMore {
		return 0, c.take(), ev
	}
	if c.prefaceLeft > 0 {
		k, ok := c.preface(in)
		n += k
		if !ok {
			c.dead = true // not HTTP/2: no GOAWAY (§3.4)
			return n, c.take(), Closing
		}
		if c.prefaceLeft > 0 {
			return n, c.take(), NeedMore
		}
	}
	for {
		if c.drained() {
			return n, c.take(), Closing
		}
		rest := in[n:]
		if len(rest) < frameHeaderLen {
			break
		}
		h := parseHeader(rest)
		if h.length > MaxFrameBytes {
			c.connError(errCodeFrameSize)
			return n, c.take(), Closing
		}
		if len(rest) < frameHeaderLen+h.length {
			break
		}
		n += frameHeaderLen + h.length
		c.frame(h, rest[frameHeaderLen:frameHeaderLen+h.length])
		if c.dead {
			return n, c.take(), Closing
		}
		if c.aliased {
			c.aliased = false
			return n, c.take(), Message
		}
		if ev := c.deliverReady(); ev != NeedMore {
			return n, c.take(), ev
		}
	}
	return n, c.take(), NeedMore
}

// take returns the output and forgets it, so c never keeps the loop's
// buffer between calls.
func (c *Conn) take() []byte {
	out := c.out
	c.out = nil
	return out
}

// preface checks the client's connection preface at the start of in.
func (c *Conn) preface(in []byte) (n int, ok bool) {
	want := clientPreface[len(clientPreface)-c.prefaceLeft:]
	n = min(len(in), len(want))
	if string(in[:n]) != want[:n] {
		return n, false
	}
	c.prefaceLeft -= n
	return n, true
}

// drained reports whether a drain is complete, and if so ends the
// connection.
func (c *Conn) drained() bool {
	if !(c.goawaySent || c.goawayRecv) || c.count > 0 {
		return false
	}
	if !c.goawaySent {
		c.out = c.finalGoAway(c.out)
	}
	c.dead = true
	return true
}

// connError ends the connection with a GOAWAY carrying code (§5.4.1).
func (c *Conn) connError(code uint32) {
	if c.dead {
		return
	}
	c.out = appendGoAway(c.out, c.lastID, code)
	c.dead = true
}

// release finishes the event last returned: a message delivered from a
// stream's buffer is consumed, and a buffer freed under it goes back.
func (c *Conn) release() {
	if i := c.delivered; i >= 0 {
		s := &c.streams[i]
		if s.id == c.deliveredID && c.deliveredLen > 0 && s.buf != nil {
			c.consume(i, c.deliveredLen)
		}
		c.delivered, c.deliveredLen = -1, 0
	}
	if c.deferred != nil {
		c.putBuf(c.deferred)
		c.deferred = nil
	}
}

// deliver makes the event for slot i: msg (nil for HalfClosed), taking
// len bytes of its buffer (0 if msg aliases the input). From now on the
// loop owes the stream an answer.
func (c *Conn) deliver(i int32, msg []byte, end bool, n int) {
	s := &c.streams[i]
	s.owed = true
	c.req = Request{Stream: s.id, Method: int(s.method), Message: msg, EndStream: end, Timeout: s.timeout}
	c.delivered, c.deliveredID, c.deliveredLen = i, s.id, n
}

// deliverReady returns the next event from the ready list, if any.
func (c *Conn) deliverReady() Event {
	for c.readyq.head >= 0 {
		if ev := c.next(c.readyq.head); ev != NeedMore {
			return ev
		}
	}
	return NeedMore
}

// next delivers the next thing of ready slot i, or takes it off the list.
func (c *Conn) next(i int32) Event {
	s := &c.streams[i]
	if !s.live() {
		panic("h2: BUG a closed stream on the ready list")
	}
	n, ok := c.headMessage(i)
	if !ok {
		c.maybeFree(i) // failed, and off the list
		return NeedMore
	}
	if n >= 0 {
		start := s.head + prefixLen
		end := start + n
		last := end == len(s.buf)
		endStream := last && s.endPending
		if endStream {
			s.endPending = false
		}
		if last && !s.endPending {
			c.remove(&c.readyq, i)
		}
		c.deliver(i, s.buf[start:end:end], endStream, prefixLen+n)
		return Message
	}
	c.remove(&c.readyq, i)
	if !s.endPending {
		return NeedMore
	}
	s.endPending = false
	if s.buffered() > 0 {
		c.fail(i, codeInternal, "incomplete message at end of stream")
		c.maybeFree(i)
		return NeedMore
	}
	c.deliver(i, nil, true, 0)
	return HalfClosed
}

// headMessage looks at the message at the head of slot i's buffer: its
// length if it is complete, -1 if not; ok is false if its prefix was bad
// and the stream failed.
func (c *Conn) headMessage(i int32) (n int, ok bool) {
	s := &c.streams[i]
	p := s.buf[s.head:]
	if len(p) < prefixLen {
		return -1, true
	}
	n, ok = c.checkPrefix(i, p)
	if !ok {
		return -1, false
	}
	if len(p)-prefixLen < n {
		return -1, true
	}
	return n, true
}

// consume drops n delivered bytes from the head of slot i's buffer and
// returns them to the stream window.
func (c *Conn) consume(i int32, n int) {
	s := &c.streams[i]
	s.head += n
	switch left := s.buffered(); {
	case left < 0:
		panic("h2: BUG consumed past the buffer")
	case left == 0:
		c.putBuf(s.buf)
		s.buf, s.head = nil, 0
	case s.head >= left:
		// Compact only when as much was consumed as is left, so copying
		// costs no more than the bytes consumed.
		copy(s.buf, s.buf[s.head:])
		s.buf, s.head = s.buf[:left], 0
	}
	c.credit(i, int64(n))
}
