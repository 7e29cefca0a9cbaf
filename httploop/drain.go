//go:build linux

package httploop

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// Drain shuts the loop down gracefully, as on SIGTERM: it stops accepting
// (closing the listener, so the kernel sends new connections to the other
// loops' listeners while they still run), lets requests in progress and
// deferred answers finish, answers every further request with Connection:
// close, and closes connections as they become idle. Run returns once no
// connection is left or at deadline, when the rest are closed (their
// deferred answers then complete harmlessly).
//
// Any goroutine may call Drain, any number of times; the earliest deadline
// wins. It does not wait: Run's return is the signal that the loop is done.
func (l *Loop) Drain(deadline time.Time) {
	d := max(deadline.UnixNano(), 1) // zero means "not draining"
	for {
		old := l.drainAt.Load()
		if old != 0 && old <= d || l.drainAt.CompareAndSwap(old, d) {
			break
		}
	}
	l.ctlMu.Lock()
	defer l.ctlMu.Unlock()
	if l.ctl >= 0 {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(l.ctl, one[:])
	}
}

// drainStep runs each iteration once Drain has been called, and reports
// whether Run should return.
func (l *Loop) drainStep(deadline int64) bool {
	if !l.draining {
		l.draining = true
		l.closeListener()
		if l.cfg.OnDrain != nil {
			l.cfg.OnDrain()
		}
		// Pump every connection once more: an idle one gets a last read
		// (a request racing the drain is answered, with Connection:
		// close) and is closed by settle when there is nothing.
		for _, c := range l.conns {
			if c.open {
				l.queue(c)
			}
		}
		if len(l.ready) > 0 {
			return false
		}
	}
	if l.nconns == 0 && (l.cfg.Holding == nil || !l.cfg.Holding()) {
		return true
	}
	if l.now >= deadline {
		for _, c := range l.conns {
			if c.open {
				l.close(c, CloseDrain)
			}
		}
		return true
	}
	return false
}
