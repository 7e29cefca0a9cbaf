//go:build linux

package httploop

// Timeouts are found by a sweep, not by timers. Each connection keeps the
// times its deadlines count from (request start, last answer, last write
// progress, deferral, linger end), which the request path sets with plain
// stores, and the sweep visits every connection about once per Tick: each
// iteration it checks a share of the connection table proportional to the
// time elapsed since the last, round-robin. The cost is O(connections) per
// Tick whatever the request rate — a few nanoseconds per connection — and
// a deadline fires at most about one Tick late, which is the stated
// granularity. There is no per-connection timer to arm, move or cancel on
// the request path.

// sweep checks the connections due this iteration.
func (l *Loop) sweep() {
	n := len(l.conns)
	if n == 0 {
		l.sweptAt = l.now
		return
	}
	k := int64(n) * (l.now - l.sweptAt) / int64(l.cfg.Tick)
	if k <= 0 {
		return // too little time has passed to owe even one visit
	}
	l.sweptAt = l.now
	for range min(k, int64(n)) {
		if l.sweepPos >= len(l.conns) {
			l.sweepPos = 0
		}
		c := l.conns[l.sweepPos]
		l.sweepPos++
		if c.open {
			l.check(c)
		}
	}
}

// check enforces c's deadlines.
func (l *Loop) check(c *conn) {
	now := l.now
	switch {
	case c.lingering:
		if now >= c.lingerUntil {
			l.close(c, c.closeWhy)
		}
		return
	case c.pending() > 0 && now-c.writeSince >= int64(l.cfg.WriteTimeout):
		l.close(c, CloseWriteTimeout)
		return
	case c.h2 != nil:
		l.checkGRPC(c)
		return
	case c.waiting:
		if now-c.deferStart >= int64(l.cfg.DeferTimeout) {
			l.cnt.v[statDeferTimeouts]++
			problemDeferTimeout.fill(&l.aux)
			l.answerDeferred(c, &l.aux)
		}
		return
	case c.closeAfter || c.pending() > l.cfg.MaxOutput:
		// The loop, not the client, is holding this connection up; the
		// write timeout above covers a client that stopped reading.
		return
	}
	if c.reqStart != 0 {
		limit := l.cfg.HeaderTimeout
		if c.f.head > 0 {
			limit = l.cfg.BodyTimeout
		}
		if now-c.reqStart >= int64(limit) {
			l.refuse(c, problemTimeout)
			l.pump(c)
		}
		return
	}
	if c.pending() == 0 && now-c.lastActive >= int64(l.cfg.IdleTimeout) {
		l.close(c, CloseIdle)
	}
}
