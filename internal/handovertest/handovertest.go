// Package handovertest is test support: a hand-over port served by a
// goroutine, as a shard's thread serves its port, for tests of what sends
// through one (grpcapi) without a node.
package handovertest

import (
	"testing"

	"github.com/tollgated/tollgated/handover"
)

// Serve returns a port of size calls that answer serves one at a time, on
// one goroutine, until the test ends; answer fills the call's Resp from
// its Req.
func Serve(tb testing.TB, size int, answer func(c *handover.Call)) *handover.Port {
	tb.Helper()
	wake := make(chan struct{}, 1)
	port, err := handover.NewPort(size, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var batch [8]*handover.Call
		for {
			n := port.Take(batch[:])
			for _, c := range batch[:n] {
				answer(c)
				c.Done()
			}
			if n > 0 {
				continue
			}
			select {
			case <-wake:
			case <-stop:
				port.Close()
				return
			}
		}
	}()
	tb.Cleanup(func() { close(stop); <-done })
	return port
}
