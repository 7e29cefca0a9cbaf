//go:build !unix

package spool

import (
	"errors"
	"fmt"
	"os"
)

// lockDir cannot lock without flock; refusing is safer than letting two
// processes append to one spool.
func lockDir(dir string) (*os.File, error) {
	return nil, fmt.Errorf("spool: lock %s: %w", dir, errors.ErrUnsupported)
}

func unlockDir(f *os.File) error { return f.Close() }
