// Package pollfile hands a file descriptor to the Go runtime's poller: a
// goroutine that waits on it parks, giving its P up at once, instead of
// holding a thread in a blocking system call (docs/DESIGN.md, "Living with
// the Go scheduler"). The shards' doorbells (eventfds) and a shard loop's
// own epoll set are waited on this way.
package pollfile

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Open returns a duplicate of fd as a non-blocking *os.File the runtime's
// poller watches; fd itself stays the caller's, and shares the duplicate's
// non-blocking flag (one open file description). Closing the file closes
// only the duplicate. A descriptor the poller cannot watch (a regular
// file) is an error: waiting on it would block a thread after all.
func Open(fd int, name string) (*os.File, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pollfile: duplicating %s: %w", name, err)
	}
	// Non-blocking, so that os.NewFile registers it with the poller.
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("pollfile: %s non-blocking: %w", name, err)
	}
	f := os.NewFile(uintptr(dup), name)
	// Only a file the poller took accepts a deadline.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("pollfile: %s cannot be polled: %w", name, err)
	}
	return f, nil
}
