//go:build !linux

package loadtest

import "time"

// sleeper falls back to time.Sleep where there is no timerfd; open-loop
// latencies then include the runtime's timer lateness.
type sleeper struct{}

func newSleeper() *sleeper { return &sleeper{} }

func (s *sleeper) sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

func (s *sleeper) close() {}
