//go:build linux

package spool

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data, and the metadata needed to read it back (its
// size), durable. fdatasync skips the timestamps fsync would also write,
// which saves a journal commit on most file systems.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
