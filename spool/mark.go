package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	lockName    = "LOCK"
	markName    = "RELEASED"
	markTmpName = "RELEASED.tmp"
	markMagic   = "TGSPREL1"
	markSize    = len(markMagic) + 8 + 4
)

// readMark returns the released mark stored in dir, or 0 if there is none.
// A mark file that exists but does not check is an error: it was written
// atomically, so damage to it is real corruption, and guessing low would
// replay released records (harmless, the ledger is idempotent) while
// guessing high would lose unexported ones.
func readMark(dir string) (uint64, error) {
	path := filepath.Join(dir, markName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("spool: read released mark: %w", err)
	}
	if len(b) != markSize || string(b[:len(markMagic)]) != markMagic ||
		crc32.Checksum(b[:markSize-4], castagnoli) != binary.LittleEndian.Uint32(b[markSize-4:]) {
		return 0, fmt.Errorf("spool: %s: %w", path, ErrCorrupt)
	}
	return binary.LittleEndian.Uint64(b[len(markMagic):]), nil
}

// writeMark atomically replaces the released mark with upTo: write a temp
// file, fsync it, rename it over the mark, fsync the directory. A crash at
// any point leaves either the old mark or the new one, never a torn one.
func writeMark(dir string, dirFile *os.File, upTo uint64) error {
	var b [markSize]byte
	copy(b[:], markMagic)
	binary.LittleEndian.PutUint64(b[len(markMagic):], upTo)
	binary.LittleEndian.PutUint32(b[markSize-4:], crc32.Checksum(b[:markSize-4], castagnoli))

	tmp := filepath.Join(dir, markTmpName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: released mark: %w", err)
	}
	_, err = f.Write(b[:])
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, markName))
	}
	if err == nil {
		err = dirFile.Sync()
	}
	if err != nil {
		return fmt.Errorf("spool: released mark: %w", err)
	}
	return nil
}
