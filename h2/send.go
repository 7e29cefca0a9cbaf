package h2

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/tollgated/tollgated/hpack"
)

// Answers. Each may be called at any time after the stream's event, on
// the loop's thread, between Steps. On a stream that is no longer live
// (answered, failed by the connection itself, or reset by either side) or
// unknown, they write nothing.

// Answer appends a unary answer on stream id: HEADERS (:status 200,
// content-type), DATA (the prefixed msg) and trailers (grpc-status 0,
// END_STREAM). Bytes the client's windows do not admit yet are held and
// go out from a later Step.
func (c *Conn) Answer(out []byte, id uint32, msg []byte) []byte {
	c.out = out
	if i := c.pin(id); i >= 0 {
		c.sendMessage(i, msg)
		c.finish(i, codeOK, "")
		c.unpin(i, false)
	}
	return c.take()
}

// Fail appends a failed answer on stream id: trailers-only (HEADERS with
// :status 200, content-type, grpc-status code and grpc-message msg,
// END_STREAM), or trailers after messages already sent. msg is cut to
// MaxStatusMessageBytes and percent-encoded.
func (c *Conn) Fail(out []byte, id uint32, code uint32, msg string) []byte {
	return c.Finish(out, id, code, msg)
}

// Send appends one message of a streaming answer on stream id, preceded
// the first time by the response HEADERS. The stream stays open.
func (c *Conn) Send(out []byte, id uint32, msg []byte) []byte {
	c.out = out
	if i := c.pin(id); i >= 0 {
		owed := c.pinned
		c.sendMessage(i, msg)
		c.unpin(i, owed)
	}
	return c.take()
}

// Finish appends the trailers (grpc-status code, grpc-message msg) ending
// a streaming answer; with no message sent before, it is Fail.
func (c *Conn) Finish(out []byte, id uint32, code uint32, msg string) []byte {
	c.out = out
	if i := c.pin(id); i >= 0 {
		c.finish(i, code, msg)
		c.unpin(i, false)
	}
	return c.take()
}

// pin finds stream id's slot and keeps it from being freed until unpin;
// c.pinned is whether the loop owed it.
func (c *Conn) pin(id uint32) int32 {
	if c.dead || id == 0 {
		return -1
	}
	i := c.lookup(id)
	if i < 0 {
		return -1
	}
	s := &c.streams[i]
	c.pinned = s.owed
	s.owed = true
	return i
}

// unpin ends pin: the loop owes the stream or not, and the slot is freed
// if that was all that held it.
func (c *Conn) unpin(i int32, owed bool) {
	c.streams[i].owed = owed
	c.maybeFree(i)
}

// fail is the connection's own failed answer on slot i.
func (c *Conn) fail(i int32, code uint32, msg string) {
	c.finish(i, code, msg)
}

// sendMessage writes the response HEADERS if due and then msg, prefixed,
// as DATA within the client's windows; the rest is held.
func (c *Conn) sendMessage(i int32, msg []byte) {
	s := &c.streams[i]
	if !s.live() {
		return
	}
	if uint64(len(msg)) > math.MaxUint32-prefixLen {
		panic("h2: BUG answer message too long")
	}
	if !s.headersSent {
		c.out = c.appendHeaders(c.out, s.id, c.respBlock, false)
		s.headersSent = true
	}
	var pre [prefixLen]byte
	binary.BigEndian.PutUint32(pre[1:], uint32(len(msg)))
	a, b := pre[:], msg
	if s.held == nil {
		a, b = c.writeData(i, a, b)
	}
	if len(a)+len(b) > 0 {
		c.hold(i, a, b)
	}
}

// allowance is how much DATA slot i may send now, in one frame.
func (c *Conn) allowance(i int32) int {
	return int(max(min(c.sendWin, c.streams[i].sendWin, int64(c.peerMaxFrame)), 0))
}

// writeData writes a then b as DATA frames on slot i, as far as the
// windows allow, and returns what is left of them.
func (c *Conn) writeData(i int32, a, b []byte) ([]byte, []byte) {
	s := &c.streams[i]
	for len(a)+len(b) > 0 {
		k := c.allowance(i)
		if k == 0 {
			break
		}
		x := min(k, len(a))
		y := min(k-x, len(b))
		c.out = appendFrameHeader(c.out, x+y, frameData, 0, s.id)
		c.out = append(c.out, a[:x]...)
		c.out = append(c.out, b[:y]...)
		a, b = a[x:], b[y:]
		c.sendWin -= int64(x + y)
		s.sendWin -= int64(x + y)
	}
	return a, b
}

// hold keeps a then b for slot i until the windows open, unless that
// would hold more than maxHeld: then the stream is reset.
func (c *Conn) hold(i int32, a, b []byte) {
	s := &c.streams[i]
	if s.heldLen()+len(a)+len(b) > c.maxHeld {
		c.streamError(i, errCodeInternal)
		return
	}
	if s.held == nil {
		s.held = c.getBuf()
	}
	s.held = append(s.held, a...)
	s.held = append(s.held, b...)
	c.pending += len(a) + len(b)
	c.park(i)
}

// park puts slot i, holding bytes, on the blocked list if only the
// connection window holds it back, and takes it off if its own window
// does: then its WINDOW_UPDATE or a SETTINGS flushes it. A connection
// WINDOW_UPDATE so visits only streams that can send, and each visit
// but the last spends window: its cost follows the bytes it releases.
func (c *Conn) park(i int32) {
	if c.streams[i].sendWin > 0 {
		c.push(&c.blockedq, i)
	} else {
		c.remove(&c.blockedq, i)
	}
}

// flush writes slot i's held bytes as far as the windows allow, then its
// trailers if they waited for them.
func (c *Conn) flush(i int32) {
	s := &c.streams[i]
	if s.held == nil {
		return
	}
	rest, _ := c.writeData(i, s.held[s.hoff:], nil)
	c.pending -= s.heldLen() - len(rest)
	s.hoff = len(s.held) - len(rest)
	if len(rest) > 0 {
		c.park(i)
		return
	}
	trailers := s.trailersPending
	c.dropHeld(i)
	if trailers {
		c.writeTrailers(i, s.trailerCode, s.trailerMsg)
		s.trailerMsg = ""
	}
}

// flushBlocked flushes the streams waiting for connection window, in
// turn, while it lasts.
func (c *Conn) flushBlocked() {
	for i := c.blockedq.head; i >= 0 && c.sendWin > 0; {
		next := c.streams[i].blocked.next
		c.flush(i)
		c.maybeFree(i)
		i = next
	}
}

// finish ends slot i's answer with the trailers for code and msg, now or
// once its held bytes are out.
func (c *Conn) finish(i int32, code uint32, msg string) {
	s := &c.streams[i]
	if !s.live() {
		return
	}
	s.localDone = true
	c.dropInput(i)
	if s.held != nil {
		s.trailersPending, s.trailerCode, s.trailerMsg = true, code, msg
		return
	}
	c.writeTrailers(i, code, msg)
}

// writeTrailers writes slot i's END_STREAM: trailers, or a trailers-only
// answer if no HEADERS went before. A client still sending is then asked
// to stop with RST_STREAM(NO_ERROR) (§8.1).
func (c *Conn) writeTrailers(i int32, code uint32, msg string) {
	s := &c.streams[i]
	if s.headersSent {
		c.out = c.appendHeaders(c.out, s.id, c.statusBlock(c.scratch[:0], "", code, msg), true)
	} else {
		c.out = c.appendHeaders(c.out, s.id, c.statusBlock(c.scratch[:0], "200", code, msg), true)
		s.headersSent = true
	}
	s.sentEnd = true
	if !s.remoteDone {
		c.out = appendRST(c.out, s.id, errCodeNo)
		c.remember(s.id)
		c.closeReset(i)
	}
}

// earlyAbort answers a new stream that gets no slot with a trailers-only
// HTTP status and gRPC status.
func (c *Conn) earlyAbort(id uint32, end bool, status string, code uint32, msg string) {
	c.out = c.appendHeaders(c.out, id, c.statusBlock(c.scratch[:0], status, code, msg), true)
	if !end {
		c.out = appendRST(c.out, id, errCodeNo)
		c.remember(id)
	}
}

// appendHeaders appends a HEADERS frame carrying block whole.
func (c *Conn) appendHeaders(out []byte, id uint32, block []byte, end bool) []byte {
	if len(block) > MaxFrameBytes {
		panic("h2: BUG header block beyond one frame")
	}
	flags := uint8(flagEndHeaders)
	if end {
		flags |= flagEndStream
	}
	out = appendFrameHeader(out, len(block), frameHeaders, flags, id)
	return append(out, block...)
}

// statusBlock appends to dst a header block carrying code and msg: a
// trailers-only answer with :status status and content-type, or with
// status "" trailers alone. Its callers pass c.scratch, and it uses
// c.msgBuf, so each block is written out before the next is made.
func (c *Conn) statusBlock(dst []byte, status string, code uint32, msg string) []byte {
	if status != "" {
		switch status {
		case "200":
			dst = hpack.AppendIndexed(dst, hpack.StaticStatus200)
		case "400":
			dst = hpack.AppendIndexed(dst, staticStatus400)
		default:
			dst = hpack.AppendLiteralIndexedName(dst, hpack.StaticStatus200, status)
		}
		dst = hpack.AppendLiteralIndexedName(dst, hpack.StaticContentType, "application/grpc")
	}
	var num [10]byte
	dst = hpack.AppendLiteralBytes(dst, "grpc-status", strconv.AppendUint(num[:0], uint64(code), 10))
	if msg != "" {
		enc := percentEncode(c.msgBuf[:0], truncate(msg, MaxStatusMessageBytes))
		dst = hpack.AppendLiteralBytes(dst, "grpc-message", enc)
	}
	return dst
}

// staticStatus400 is the static table's ":status 400" (RFC 7541 App. A).
const staticStatus400 = 12

// truncate cuts s to at most n bytes, at a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// percentEncode appends s percent-encoded as the gRPC spec has
// grpc-message: bytes outside 0x20-0x7E, and '%', as %XX.
func percentEncode(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b >= 0x20 && b <= 0x7e && b != '%' {
			dst = append(dst, b)
			continue
		}
		dst = append(dst, '%', hex[b>>4], hex[b&0xf])
	}
	return dst
}

// statusBlockBytes bounds a status header block: :status, content-type,
// grpc-status and the longest grpc-message, with their encodings'
// overhead.
const statusBlockBytes = 3*MaxStatusMessageBytes + 128
