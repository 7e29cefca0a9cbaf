//go:build !unix

package ring

import (
	"sync/atomic"
	"time"
)

// bell is a one-slot channel where the platform has no poll(2). There is no
// descriptor to hand to a poller, so fd is -1 and consumers sleep in wait.
// The buffered slot holds at most one pending ring, so repeated rings
// collapse as they do with an eventfd.
type bell struct {
	ch     chan struct{}
	closed atomic.Bool
}

func (b *bell) open() error {
	b.ch = make(chan struct{}, 1)
	return nil
}

func (b *bell) fd() int {
	return -1
}

func (b *bell) ring() {
	select {
	case b.ch <- struct{}{}:
	default: // a ring is already pending
	}
}

func (b *bell) drain() {
	select {
	case <-b.ch:
	default:
	}
}

// wait consumes the pending ring when it reports true, so the drain that
// follows it in Doorbell.Wait finds nothing.
func (b *bell) wait(timeout time.Duration) bool {
	if timeout < 0 {
		<-b.ch
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-b.ch:
		return true
	case <-t.C:
		return false
	}
}

func (b *bell) close() error {
	if b.closed.Swap(true) {
		return errClosed
	}
	return nil
}
