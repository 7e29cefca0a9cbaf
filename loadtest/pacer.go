package loadtest

import "time"

// at returns when global send k is due, in ns since the run started.
// Computing each time from k instead of adding intervals keeps the
// schedule free of drift.
func (r *run) at(k int64) int64 {
	return int64(float64(k) * r.interval)
}

// pace wakes open-loop connections when their sends fall due.
//
// Go timers cannot do this: when the process is idle the runtime sleeps in
// epoll with millisecond granularity, so time.Sleep(100µs) takes about a
// millisecond here, and since open-loop latency is measured from the due
// time that lateness would be charged to the server. The pacer sleeps on a
// timerfd instead (see sleeper_linux.go), whose expiry wakes the poller to
// the microsecond, and pokes the connections whose sends are due. A poke is
// only a wake-up: each connection works out from the schedule itself which
// sends are due, so a lost or merged poke loses nothing.
func (r *run) pace() {
	sl := newSleeper()
	defer sl.close()
	n := int64(len(r.conns))
	for k := int64(0); ; {
		due := r.at(k)
		if due >= r.end.Load() {
			return
		}
		if now := r.now(); due > now {
			// Sleep in bounded steps so that a stop is noticed promptly.
			d := min(time.Duration(due-now), 20*time.Millisecond)
			sl.sleep(d)
			if r.stopping() {
				return
			}
			continue
		}
		now := r.now()
		for poked := int64(0); r.at(k) <= now; k++ {
			if poked < n {
				select {
				case r.conns[k%n].wake <- struct{}{}:
				default:
				}
				poked++
			}
		}
	}
}
