//go:build !linux

package spool

import "os"

// datasync falls back to fsync (on darwin os.File.Sync uses F_FULLFSYNC).
func datasync(f *os.File) error { return f.Sync() }
