package h2

import (
	"encoding/binary"
	"errors"

	"github.com/tollgated/tollgated/hpack"
)

// frame handles one whole frame. A connection error sets c.dead; a
// message aliasing p sets c.aliased.
func (c *Conn) frame(h header, p []byte) {
	if !c.sawSettings && (h.typ != frameSettings || h.has(flagAck)) {
		c.connError(errCodeProtocol) // the preface ends with SETTINGS (§3.4)
		return
	}
	if c.hb.id != 0 && (h.typ != frameContinuation || h.id != c.hb.id) {
		c.connError(errCodeProtocol) // a header block is not interleaved (§6.10)
		return
	}
	switch h.typ {
	case frameData:
		c.onData(h, p)
	case frameHeaders:
		c.onHeaders(h, p)
	case framePriority:
		c.onPriority(h, p)
	case frameRSTStream:
		c.onRSTStream(h, p)
	case frameSettings:
		c.onSettings(h, p)
	case framePushPromise:
		c.connError(errCodeProtocol) // clients do not push (§8.4)
	case framePing:
		c.onPing(h, p)
	case frameGoAway:
		c.onGoAway(h, p)
	case frameWindowUpdate:
		c.onWindowUpdate(h, p)
	case frameContinuation:
		c.onContinuation(h, p)
	default:
		// Unknown types are ignored (§4.1, §5.5).
	}
	// Handlers never free a slot, so that no slot changes under them:
	// the stream's slot is freed here, once the frame is done.
	if h.id != 0 && !c.dead {
		if i := c.lookup(h.id); i >= 0 {
			c.maybeFree(i)
		}
	}
}

// idle reports whether stream id is idle (§5.1): the client has not opened
// it or a higher one. Even ids are the server's, and it opens none.
func (c *Conn) idle(id uint32) bool {
	return id&1 == 0 || id > c.lastID
}

// streamError resets the stream in slot i with code (§5.4.2).
func (c *Conn) streamError(i int32, code uint32) {
	s := &c.streams[i]
	c.out = appendRST(c.out, s.id, code)
	if !s.remoteDone {
		c.remember(s.id)
	}
	c.closeReset(i)
}

// resetID resets stream id, which may have no slot, with code.
func (c *Conn) resetID(id, code uint32) {
	if i := c.lookup(id); i >= 0 {
		if !c.streams[i].reset {
			c.streamError(i, code)
		}
		return
	}
	c.out = appendRST(c.out, id, code)
	c.remember(id)
}

// closeReset marks slot i reset (by either side): nothing more is
// delivered or sent on it.
func (c *Conn) closeReset(i int32) {
	s := &c.streams[i]
	s.reset, s.remoteDone = true, true
	c.dropInput(i)
	c.dropHeld(i)
}

// unpad strips the padding of a DATA or HEADERS payload (§6.1).
func unpad(h header, p []byte) ([]byte, bool) {
	if !h.has(flagPadded) {
		return p, true
	}
	if len(p) == 0 {
		return nil, false
	}
	pad := int(p[0])
	if pad >= len(p) {
		return nil, false
	}
	return p[1 : len(p)-pad], true
}

// onData handles DATA (§6.1).
func (c *Conn) onData(h header, p []byte) {
	if h.id == 0 || c.idle(h.id) {
		c.connError(errCodeProtocol)
		return
	}
	data, ok := unpad(h, p)
	if !ok {
		c.connError(errCodeProtocol)
		return
	}
	// The whole payload counts against the windows (§6.9.1).
	flow := int64(len(p))
	if flow > c.recvWin {
		c.connError(errCodeFlowControl)
		return
	}
	c.recvWin -= flow
	c.recvCredit += flow
	if c.recvCredit >= c.connWin/2 {
		c.out = appendWindowUpdate(c.out, 0, c.recvCredit)
		c.recvWin += c.recvCredit
		c.recvCredit = 0
	}
	i := c.lookup(h.id)
	if i < 0 {
		// A closed stream: one the server reset is ignored (§5.1).
		if !c.recentlyReset(h.id) {
			c.resetID(h.id, errCodeStreamClosed)
		}
		return
	}
	s := &c.streams[i]
	switch {
	case s.reset:
		return
	case s.remoteDone:
		c.streamError(i, errCodeStreamClosed)
		return
	case flow > s.recvWin:
		c.streamError(i, errCodeFlowControl)
		return
	}
	s.recvWin -= flow
	s.dataLen += int64(len(data))
	end := h.has(flagEndStream)
	if s.contentLength >= 0 && (s.dataLen > s.contentLength || end && s.dataLen != s.contentLength) {
		c.streamError(i, errCodeProtocol) // malformed (§8.1.1)
		return
	}
	// Set before feeding, so a message it completes needs no
	// WINDOW_UPDATE: the client will send nothing more.
	s.remoteDone = s.remoteDone || end
	c.credit(i, flow-int64(len(data)))
	if s.live() {
		c.feed(i, data)
	} else {
		c.credit(i, int64(len(data)))
	}
	if end {
		c.endOfInput(i)
	}
}

// credit returns n consumed bytes to slot i's window once enough have
// gathered: at half the window, or as soon as what is left of the window
// could not carry a whole message (so a message never waits for a
// WINDOW_UPDATE that is not coming).
func (c *Conn) credit(i int32, n int64) {
	s := &c.streams[i]
	s.credit += n
	if s.credit == 0 || s.remoteDone || !s.live() {
		return
	}
	if s.credit >= c.initWin/2 || c.initWin-s.credit < c.maxWire {
		c.out = appendWindowUpdate(c.out, s.id, s.credit)
		s.recvWin += s.credit
		s.credit = 0
	}
}

// feed takes the DATA bytes of live slot i. A message that arrives whole
// while nothing is buffered is delivered in place; the rest is buffered.
func (c *Conn) feed(i int32, data []byte) {
	s := &c.streams[i]
	if s.buffered() == 0 && len(data) >= prefixLen && !c.aliased {
		n, ok := c.checkPrefix(i, data)
		if !ok {
			return
		}
		if prefixLen+n <= len(data) {
			end := prefixLen + n
			c.aliased = true
			c.deliver(i, data[prefixLen:end:end], false, 0)
			c.credit(i, int64(end))
			data = data[end:]
		}
	}
	if len(data) == 0 {
		return
	}
	if s.buf == nil {
		s.buf = c.getBuf()
	}
	s.buf = append(s.buf, data...)
	n, ok := c.headMessage(i)
	if ok && n >= 0 {
		c.push(&c.readyq, i)
	}
}

// checkPrefix reads the gRPC prefix at the start of p for slot i: the
// message length, or false if the stream failed for it.
func (c *Conn) checkPrefix(i int32, p []byte) (n int, ok bool) {
	length := binary.BigEndian.Uint32(p[1:prefixLen])
	switch {
	case p[0] == 1:
		c.fail(i, codeUnimplemented, "compressed messages are not supported")
		return 0, false
	case p[0] != 0:
		c.fail(i, codeInternal, "malformed message prefix")
		return 0, false
	case int64(length) > int64(c.cfg.MaxMessageBytes):
		c.fail(i, codeResourceExhausted, "request message larger than the server accepts")
		return 0, false
	}
	return int(length), true
}

// endOfInput handles the client's END_STREAM on slot i, whose remoteDone
// is set.
func (c *Conn) endOfInput(i int32) {
	s := &c.streams[i]
	if !s.live() {
		return
	}
	if c.aliased && c.delivered == i && s.buffered() == 0 {
		c.req.EndStream = true
		return
	}
	s.endPending = true
	c.push(&c.readyq, i)
}

// onHeaders handles HEADERS (§6.2): a request's headers, or its trailers.
func (c *Conn) onHeaders(h header, p []byte) {
	if h.id == 0 {
		c.connError(errCodeProtocol)
		return
	}
	frag, ok := unpad(h, p)
	selfDep := false
	if ok && h.has(flagPriority) {
		if len(frag) < 5 {
			ok = false
		} else {
			selfDep = binary.BigEndian.Uint32(frag)&(1<<31-1) == h.id
			frag = frag[5:]
		}
	}
	if !ok {
		c.connError(errCodeProtocol)
		return
	}
	if h.has(flagEndHeaders) {
		c.headerBlock(h.id, frag, h.has(flagEndStream), selfDep)
		return
	}
	c.hb = blockState{id: h.id, end: h.has(flagEndStream), selfDep: selfDep, charged: frameHeaderLen + len(p)}
	c.hbBuf = append(c.hbBuf[:0], frag...)
}

// onContinuation handles CONTINUATION (§6.10). Frame handling already
// checked that it continues the open header block, if there is one.
func (c *Conn) onContinuation(h header, p []byte) {
	if c.hb.id == 0 {
		c.connError(errCodeProtocol)
		return
	}
	c.hb.charged += frameHeaderLen + len(p)
	if c.hb.charged > c.blockLimit {
		// Too long to hold, and too long to decode without holding:
		// the decoder's table would fall out of step, so the
		// connection ends (CVE-2024-27316).
		c.connError(errCodeEnhanceYourCalm)
		return
	}
	c.hbBuf = append(c.hbBuf, p...)
	if !h.has(flagEndHeaders) {
		return
	}
	hb := c.hb
	c.hb = blockState{}
	c.headerBlock(hb.id, c.hbBuf, hb.end, hb.selfDep)
	c.hbBuf = c.hbBuf[:0]
}

// decode decodes a header block into c.fields. It reports whether the
// list is within bounds; a malformed block ends the connection.
func (c *Conn) decode(block []byte) (fits, ok bool) {
	err := c.dec.Decode(block, c.fields)
	switch {
	case err == nil:
		return true, true
	case errors.Is(err, hpack.ErrTooLarge):
		return false, true
	}
	c.connError(errCodeCompression)
	return false, false
}

// headerBlock handles a complete header block on stream id.
func (c *Conn) headerBlock(id uint32, block []byte, end, selfDep bool) {
	if i := c.lookup(id); i >= 0 {
		c.trailers(i, block, end, selfDep)
		return
	}
	if !c.idle(id) {
		// A closed stream. Trailers on one the server reset are
		// decoded, for the table, and dropped (§5.1); otherwise the id
		// is reused (§5.1.1).
		if !c.recentlyReset(id) {
			c.connError(errCodeProtocol)
			return
		}
		c.decode(block)
		return
	}
	if id&1 == 0 {
		c.connError(errCodeProtocol)
		return
	}
	c.open(id, block, end, selfDep)
}

// refuse resets a new stream id with code, keeping it in mind if the
// client may still send on it.
func (c *Conn) refuse(id uint32, end bool, code uint32) {
	c.out = appendRST(c.out, id, code)
	if !end {
		c.remember(id)
	}
}

// open handles the headers of a new stream.
func (c *Conn) open(id uint32, block []byte, end, selfDep bool) {
	c.lastID = id
	fits, ok := c.decode(block) // always, to keep the table in step
	switch {
	case !ok:
		return
	case selfDep:
		c.refuse(id, end, errCodeProtocol) // §5.3.1
		return
	case c.goawaySent || c.goawayRecv || c.count >= int(c.cfg.MaxStreams):
		c.refuse(id, end, errCodeRefusedStream)
		return
	case !fits:
		c.earlyAbort(id, end, "431", codeResourceExhausted, "header list too large")
		return
	}
	var r requestHeaders
	switch v := c.checkRequest(&r); v {
	case verdictOK:
	case verdictMalformed:
		c.refuse(id, end, errCodeProtocol) // §8.1.1
		return
	case verdictMethod:
		c.earlyAbort(id, end, "405", codeInternal, "method must be POST")
		return
	case verdictContentType:
		c.earlyAbort(id, end, "415", codeInvalidArgument, "content-type must be application/grpc")
		return
	case verdictTimeout:
		c.earlyAbort(id, end, "400", codeInternal, "malformed grpc-timeout")
		return
	default:
		panic("h2: BUG unknown verdict")
	}
	i := c.newStream(id)
	s := &c.streams[i]
	s.method, s.timeout, s.contentLength = r.method, r.timeout, r.contentLength
	if end {
		s.remoteDone = true
		if s.contentLength > 0 {
			c.streamError(i, errCodeProtocol)
			return
		}
		s.endPending = true
		c.push(&c.readyq, i)
	}
}

// trailers handles a second header block on slot i: the request's
// trailers, which must end the stream (§8.1).
func (c *Conn) trailers(i int32, block []byte, end, selfDep bool) {
	fits, ok := c.decode(block)
	s := &c.streams[i]
	switch {
	case !ok || s.reset:
		return
	case selfDep:
		c.streamError(i, errCodeProtocol)
		return
	case s.remoteDone:
		c.streamError(i, errCodeStreamClosed) // half-closed (remote), §5.1
		return
	case !end || fits && !c.checkTrailers():
		c.streamError(i, errCodeProtocol) // malformed, §8.1
		return
	case s.contentLength >= 0 && s.dataLen != s.contentLength:
		c.streamError(i, errCodeProtocol)
		return
	}
	s.remoteDone = true
	if !fits {
		c.fail(i, codeResourceExhausted, "trailer list too large")
	}
	c.endOfInput(i)
}

// onPriority handles PRIORITY (§6.3): checked, then ignored.
func (c *Conn) onPriority(h header, p []byte) {
	switch {
	case h.id == 0:
		c.connError(errCodeProtocol)
	case len(p) != 5:
		c.resetID(h.id, errCodeFrameSize)
	case binary.BigEndian.Uint32(p)&(1<<31-1) == h.id:
		c.resetID(h.id, errCodeProtocol)
	}
}

// onRSTStream handles RST_STREAM (§6.4).
func (c *Conn) onRSTStream(h header, p []byte) {
	switch {
	case h.id == 0 || c.idle(h.id):
		c.connError(errCodeProtocol)
		return
	case len(p) != 4:
		c.connError(errCodeFrameSize)
		return
	}
	if i := c.lookup(h.id); i >= 0 && !c.streams[i].reset {
		c.closeReset(i)
	}
}

// onSettings handles SETTINGS (§6.5): each value checked, acknowledged.
func (c *Conn) onSettings(h header, p []byte) {
	switch {
	case h.id != 0:
		c.connError(errCodeProtocol)
		return
	case h.has(flagAck):
		if len(p) != 0 {
			c.connError(errCodeFrameSize)
		}
		return
	case len(p)%6 != 0:
		c.connError(errCodeFrameSize)
		return
	}
	c.sawSettings = true
	initWin := c.peerInitWin
	for ; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		switch id {
		case settingEnablePush, settingEnableConnect, settingNoRFC7540Priorities:
			if v > 1 {
				c.connError(errCodeProtocol)
				return
			}
		case settingInitialWindowSize:
			if v > maxWindow {
				c.connError(errCodeFlowControl)
				return
			}
			initWin = int64(v)
		case settingMaxFrameSize:
			if v < MaxFrameBytes || v > maxFrameLimit {
				c.connError(errCodeProtocol)
				return
			}
			c.peerMaxFrame = int(v)
		}
		// HEADER_TABLE_SIZE bounds a table the server never adds to;
		// MAX_CONCURRENT_STREAMS its pushes, which it never makes;
		// MAX_HEADER_LIST_SIZE is advisory and the server's blocks are
		// small. Unknown settings are ignored.
	}
	c.out = appendFrameHeader(c.out, 0, frameSettings, flagAck, 0)
	c.setPeerWindow(initWin)
}

// setPeerWindow applies a new SETTINGS_INITIAL_WINDOW_SIZE to every
// stream's send window (§6.9.2).
func (c *Conn) setPeerWindow(w int64) {
	delta := w - c.peerInitWin
	if delta == 0 {
		return
	}
	for i := c.opened.head; i >= 0; i = c.streams[i].open.next {
		if c.streams[i].sendWin+delta > maxWindow {
			c.connError(errCodeFlowControl)
			return
		}
	}
	c.peerInitWin = w
	for i := c.opened.head; i >= 0; i = c.streams[i].open.next {
		s := &c.streams[i]
		s.sendWin += delta
		if s.held != nil {
			c.park(i)
		}
	}
	c.flushBlocked()
}

// onPing handles PING (§6.7).
func (c *Conn) onPing(h header, p []byte) {
	switch {
	case h.id != 0:
		c.connError(errCodeProtocol)
	case len(p) != 8:
		c.connError(errCodeFrameSize)
	case !h.has(flagAck):
		c.out = appendFrameHeader(c.out, 8, framePing, flagAck, 0)
		c.out = append(c.out, p...)
	case c.goawayFirst && !c.goawaySent && string(p) == drainPing:
		// The client has read the first GOAWAY: whatever it opens
		// from now on, it opens knowing it will be refused.
		c.out = c.finalGoAway(c.out)
	}
}

// onGoAway handles GOAWAY (§6.8): no new streams; the connection closes
// once the streams in flight are done.
func (c *Conn) onGoAway(h header, p []byte) {
	switch {
	case h.id != 0:
		c.connError(errCodeProtocol)
	case len(p) < 8:
		c.connError(errCodeFrameSize)
	default:
		c.goawayRecv = true
	}
}

// onWindowUpdate handles WINDOW_UPDATE (§6.9), which may release held
// answer bytes.
func (c *Conn) onWindowUpdate(h header, p []byte) {
	if len(p) != 4 {
		c.connError(errCodeFrameSize)
		return
	}
	incr := int64(binary.BigEndian.Uint32(p) & (1<<31 - 1))
	if h.id == 0 {
		switch {
		case incr == 0:
			c.connError(errCodeProtocol)
			return
		case c.sendWin+incr > maxWindow:
			c.connError(errCodeFlowControl)
			return
		}
		c.sendWin += incr
		c.flushBlocked()
		return
	}
	if c.idle(h.id) {
		c.connError(errCodeProtocol)
		return
	}
	i := c.lookup(h.id)
	if i < 0 || c.streams[i].reset {
		return // closed: ignored (§5.1)
	}
	s := &c.streams[i]
	switch {
	case incr == 0:
		c.streamError(i, errCodeProtocol)
	case s.sendWin+incr > maxWindow:
		c.streamError(i, errCodeFlowControl)
	default:
		s.sendWin += incr
		c.flush(i)
	}
}
