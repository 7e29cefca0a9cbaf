package h2

import "fmt"

// check verifies the Conn's invariants, for tests.
func (c *Conn) check() error {
	used := 0
	for i := range c.streams {
		s := &c.streams[i]
		if s.id == 0 {
			continue
		}
		used++
		if c.lookup(s.id) != int32(i) {
			return fmt.Errorf("stream %d not indexed at its slot", s.id)
		}
		if !s.open.in {
			return fmt.Errorf("stream %d not on the open list", s.id)
		}
		if s.buf == nil && s.head != 0 || s.buf != nil && s.buffered() <= 0 {
			return fmt.Errorf("stream %d: buffer %d/%d", s.id, s.head, len(s.buf))
		}
		if int64(s.buffered()) > c.initWin {
			return fmt.Errorf("stream %d buffers %d beyond its window", s.id, s.buffered())
		}
		if s.blocked.in != (s.held != nil && s.sendWin > 0) || s.held != nil && s.heldLen() <= 0 {
			return fmt.Errorf("stream %d: held %d, blocked %v", s.id, s.heldLen(), s.blocked.in)
		}
		if s.heldLen() > c.maxHeld {
			return fmt.Errorf("stream %d holds %d", s.id, s.heldLen())
		}
		if s.ready.in && !s.live() {
			return fmt.Errorf("stream %d ready but not live", s.id)
		}
		if s.trailersPending && (!s.localDone || s.held == nil) {
			return fmt.Errorf("stream %d: trailers pending without held bytes", s.id)
		}
		if s.reset && (s.buf != nil || s.held != nil || s.ready.in) {
			return fmt.Errorf("stream %d reset but holding", s.id)
		}
		if s.sentEnd && !s.localDone {
			return fmt.Errorf("stream %d: END_STREAM sent, answer not done", s.id)
		}
		if !s.owed && s.closed() {
			return fmt.Errorf("stream %d closed and not owed, yet not freed", s.id)
		}
	}
	if used != c.count || c.count+len(c.free) != len(c.streams) || c.count > int(c.cfg.MaxStreams) {
		return fmt.Errorf("count %d, used %d, free %d", c.count, used, len(c.free))
	}
	indexed := 0
	for _, i := range c.index {
		if i >= 0 {
			indexed++
		}
	}
	if indexed != used {
		return fmt.Errorf("%d indexed, %d used", indexed, used)
	}
	pending := 0
	for i := c.opened.head; i >= 0; i = c.streams[i].open.next {
		pending += c.streams[i].heldLen()
	}
	if pending != c.pending {
		return fmt.Errorf("pending %d, held %d", c.pending, pending)
	}
	if n := listLen(c, &c.opened); n != used {
		return fmt.Errorf("open list %d, used %d", n, used)
	}
	if c.pooled > retainBytes {
		return fmt.Errorf("pooled %d", c.pooled)
	}
	return nil
}

func listLen(c *Conn, l *list) int {
	n := 0
	prev := int32(-1)
	for i := l.head; i >= 0; i = l.at(&c.streams[i]).next {
		if l.at(&c.streams[i]).prev != prev {
			panic("h2: list links broken")
		}
		prev = i
		n++
	}
	if l.tail != prev {
		panic("h2: list tail broken")
	}
	return n
}
