package h2

// stream is one slot of the stream table: a client stream from its
// HEADERS until it is closed and the loop no longer owes its answer.
//
// Invariants:
//   - id != 0 iff the slot is in use; then index maps id to the slot and
//     the slot is on the open list.
//   - buf != nil iff bytes of the request are buffered (buf[head:] is not
//     empty); len(buf)-head <= the stream window, and head <= len(buf)-head
//     after every consumption (compaction), so len(buf) stays below twice
//     the window plus a frame.
//   - held != nil iff answer bytes are held back (held[hoff:] is not
//     empty), at most Config.MaxHeldBytes of them; the stream is on the
//     blocked list iff it holds bytes and its own window is open, so
//     only the connection window holds it back.
//   - on the ready list iff !localDone && !reset and a complete message is
//     buffered or endPending (checked lazily: a stream whose buffered
//     message is not yet complete leaves the list when visited).
//   - trailersPending implies localDone and held != nil.
//   - sentEnd implies localDone; reset implies no buffers and no list but
//     open.
type stream struct {
	id      uint32
	method  int32
	timeout int64

	// Receiving.
	recvWin       int64  // what the client may still send on the stream
	credit        int64  // bytes consumed and not yet returned to recvWin
	buf           []byte // reassembly; buf[head:] not yet delivered
	head          int
	contentLength int64 // -1 if the request has none
	dataLen       int64 // the DATA payload received, padding excluded

	// Sending.
	sendWin     int64  // the client's window for our DATA on this stream
	held        []byte // held[hoff:] is DATA payload waiting for window
	hoff        int
	trailerCode uint32 // the trailers to send once held is flushed
	trailerMsg  string

	remoteDone      bool // the client's END_STREAM arrived, or its RST_STREAM
	endPending      bool // remoteDone, not yet reported to the loop
	localDone       bool // the answer is complete: trailers written or pending
	headersSent     bool // response HEADERS written
	trailersPending bool // trailers wait behind held bytes
	sentEnd         bool // our END_STREAM is written
	reset           bool // RST_STREAM sent or received: closed
	owed            bool // the loop was handed an event and has not answered

	open, ready, blocked links
}

// live reports whether the stream still takes answer bytes.
func (s *stream) live() bool { return !s.localDone && !s.reset }

func (s *stream) buffered() int { return len(s.buf) - s.head }

func (s *stream) heldLen() int { return len(s.held) - s.hoff }

// closed reports whether the stream is closed in the sense of RFC 9113
// §5.1: reset, or END_STREAM sent and received.
func (s *stream) closed() bool { return s.reset || (s.remoteDone && s.sentEnd) }

// links chain a slot into an intrusive list of slots.
type links struct {
	prev, next int32
	in         bool
}

// list is a doubly linked list of slots, through the links that at
// selects; -1 ends it.
type list struct {
	head, tail int32
	at         func(*stream) *links
}

func openLinks(s *stream) *links    { return &s.open }
func readyLinks(s *stream) *links   { return &s.ready }
func blockedLinks(s *stream) *links { return &s.blocked }

func (c *Conn) push(l *list, i int32) {
	k := l.at(&c.streams[i])
	if k.in {
		return
	}
	*k = links{prev: l.tail, next: -1, in: true}
	if l.tail >= 0 {
		l.at(&c.streams[l.tail]).next = i
	} else {
		l.head = i
	}
	l.tail = i
}

func (c *Conn) remove(l *list, i int32) {
	k := l.at(&c.streams[i])
	if !k.in {
		return
	}
	if k.prev >= 0 {
		l.at(&c.streams[k.prev]).next = k.next
	} else {
		l.head = k.next
	}
	if k.next >= 0 {
		l.at(&c.streams[k.next]).prev = k.prev
	} else {
		l.tail = k.prev
	}
	*k = links{prev: -1, next: -1}
}

// The index maps stream ids to slots: open addressing with linear probing
// over a power-of-two table at least twice MaxStreams, so it is at most
// half full and a probe ends soon.

func (c *Conn) home(id uint32) uint32 {
	return (id * 0x9e3779b1) >> c.indexShift
}

// lookup returns the slot of stream id, or -1.
func (c *Conn) lookup(id uint32) int32 {
	mask := uint32(len(c.index) - 1)
	for j := c.home(id); ; j = (j + 1) & mask {
		i := c.index[j]
		if i < 0 || c.streams[i].id == id {
			return i
		}
	}
}

func (c *Conn) indexAdd(id uint32, i int32) {
	mask := uint32(len(c.index) - 1)
	j := c.home(id)
	for c.index[j] >= 0 {
		j = (j + 1) & mask
	}
	c.index[j] = i
}

// indexDelete removes id by backward shift, so no tombstones accumulate.
func (c *Conn) indexDelete(id uint32) {
	mask := uint32(len(c.index) - 1)
	j := c.home(id)
	for c.streams[c.index[j]].id != id {
		j = (j + 1) & mask
	}
	for k := j; ; {
		c.index[j] = -1
		for {
			k = (k + 1) & mask
			if c.index[k] < 0 {
				return
			}
			h := c.home(c.streams[c.index[k]].id)
			// The entry at k may move to j unless its home lies
			// cyclically in (j, k].
			if (j < k && (h <= j || h > k)) || (j > k && h <= j && h > k) {
				break
			}
		}
		c.index[j] = c.index[k]
		j = k
	}
}

// newStream takes a free slot for stream id; the caller made sure one is
// free (count < MaxStreams).
func (c *Conn) newStream(id uint32) int32 {
	n := len(c.free)
	if n == 0 {
		panic("h2: BUG no free stream slot")
	}
	i := c.free[n-1]
	c.free = c.free[:n-1]
	s := &c.streams[i]
	*s = stream{
		id:            id,
		method:        -1,
		recvWin:       c.initWin,
		sendWin:       c.peerInitWin,
		contentLength: -1,
		open:          links{prev: -1, next: -1},
		ready:         links{prev: -1, next: -1},
		blocked:       links{prev: -1, next: -1},
	}
	c.indexAdd(id, i)
	c.push(&c.opened, i)
	c.count++
	return i
}

// maybeFree frees slot i once its stream is closed and the loop owes
// nothing on it.
func (c *Conn) maybeFree(i int32) {
	s := &c.streams[i]
	if s.id == 0 || s.owed || !s.closed() {
		return
	}
	c.dropInput(i)
	c.dropHeld(i)
	c.remove(&c.opened, i)
	c.indexDelete(s.id)
	s.id = 0
	c.free = append(c.free, i)
	c.count--
}

// dropInput ends delivery on slot i: its buffered bytes are discarded and
// nothing more is reported to the loop.
func (c *Conn) dropInput(i int32) {
	s := &c.streams[i]
	c.remove(&c.readyq, i)
	s.endPending = false
	if s.buf == nil {
		return
	}
	if i == c.delivered && c.deliveredLen > 0 {
		// The loop's Request.Message points into buf until the next
		// Step.
		if c.deferred != nil {
			panic("h2: BUG two deferred buffers")
		}
		c.deferred = s.buf
	} else {
		c.putBuf(s.buf)
	}
	s.buf, s.head = nil, 0
}

// dropHeld discards slot i's held answer bytes.
func (c *Conn) dropHeld(i int32) {
	s := &c.streams[i]
	c.remove(&c.blockedq, i)
	s.trailersPending = false
	if s.held == nil {
		return
	}
	c.pending -= s.heldLen()
	c.putBuf(s.held)
	s.held, s.hoff = nil, 0
}

// Spare buffers, for reassembly and held answers.

// bufInitCap is a new buffer's capacity: one frame's payload.
const bufInitCap = MaxFrameBytes

func (c *Conn) getBuf() []byte {
	n := len(c.pool)
	if n == 0 {
		return make([]byte, 0, bufInitCap)
	}
	b := c.pool[n-1]
	c.pool[n-1] = nil
	c.pool = c.pool[:n-1]
	c.pooled -= cap(b)
	return b[:0]
}

func (c *Conn) putBuf(b []byte) {
	if c.pooled+cap(b) > retainBytes || len(c.pool) == cap(c.pool) {
		return
	}
	c.pool = append(c.pool, b[:0])
	c.pooled += cap(b)
}

// remember notes that the server reset stream id while the client may
// still be sending on it.
func (c *Conn) remember(id uint32) {
	c.recent[c.recentNext] = id
	c.recentNext = (c.recentNext + 1) % recentResets
}

func (c *Conn) recentlyReset(id uint32) bool {
	for _, r := range c.recent {
		if r == id {
			return true
		}
	}
	return false
}
