//go:build unix

package spool

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive, non-blocking flock on dir/LOCK. flock belongs
// to the open file description, so a second Open of the same directory fails
// even inside one process, and the kernel drops the lock when the holder
// exits however it exits (kill -9 included): no stale lock file to clean up.
func lockDir(dir string) (*os.File, error) {
	path := dir + string(os.PathSeparator) + lockName
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: open lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("spool: %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("spool: flock %s: %w", path, err)
	}
	return f, nil
}

// unlockDir releases the lock taken by lockDir. Closing the descriptor is
// what releases it; the explicit LOCK_UN only makes the order obvious.
func unlockDir(f *os.File) error {
	uerr := unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if err := f.Close(); err != nil {
		return fmt.Errorf("spool: close lock: %w", err)
	}
	if uerr != nil {
		return fmt.Errorf("spool: unlock: %w", uerr)
	}
	return nil
}
