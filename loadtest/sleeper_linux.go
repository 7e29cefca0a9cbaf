package loadtest

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper sleeps precisely while the process has headroom, and not much
// longer than asked when it has none.
//
// It arms a non-blocking timerfd and reads it through the runtime poller.
// While the process has idle moments, the runtime waits in epoll and the
// timerfd's expiry wakes it to the microsecond; a Go timer alone would wait
// for the next millisecond tick there. When the process is saturated the
// runtime polls epoll only when it runs out of work (or every 10ms from
// sysmon), so the read also carries a deadline a little after the expiry:
// the runtime checks its timers at every scheduling point, and the
// deadline readies the goroutine directly. The deadline is deliberately
// late: a pacer woken by timers at every due time keeps the run queue full
// and starves the goroutines waiting for responses in epoll, which is
// worse for the measurement than a late poke.
// fallbackDelay is how late the deadline backs up the timerfd.
const fallbackDelay = 2 * time.Millisecond

type sleeper struct {
	fd   int
	file *os.File
	buf  [8]byte
}

func newSleeper() *sleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &sleeper{fd: -1}
	}
	// os.NewFile sees the non-blocking flag and registers the fd with the
	// poller. Only the raw fd is used for timerfd_settime: calling
	// file.Fd() would switch it back to blocking mode.
	return &sleeper{fd: fd, file: os.NewFile(uintptr(fd), "timerfd")}
}

func (s *sleeper) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	if s.file == nil {
		time.Sleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(s.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	if err := s.file.SetReadDeadline(time.Now().Add(d + fallbackDelay)); err != nil {
		time.Sleep(d)
		return
	}
	// Data (the timer fired) and ErrDeadlineExceeded both mean time is up.
	// A tick left unread is cleared by the next timerfd_settime.
	_, _ = s.file.Read(s.buf[:])
}

func (s *sleeper) close() {
	if s.file != nil {
		s.file.Close()
	}
}
