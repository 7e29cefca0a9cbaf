package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// The spool's owner is a label its user stores in it (the daemon: the node
// and the incarnation whose usage it holds), so that a spool moved to
// another identity — a lost node id file, a copied data directory — is
// recognised before its records are billed under the wrong name. The spool
// does not interpret it. It is the file OWNER, replaced atomically like
// the released mark, and Quarantine carries it into the rebuilt spool.
const (
	ownerName    = "OWNER"
	ownerTmpName = "OWNER.tmp"
	// MaxOwner bounds a label.
	MaxOwner = 256
)

// ErrOwner refuses a label SetOwner cannot store.
var ErrOwner = errors.New("spool: an owner label is 1 to MaxOwner bytes of UTF-8 on one line")

// readOwner returns the label stored in dir, "" if none.
func readOwner(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ownerName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("spool: read owner: %w", err)
	}
	label := strings.TrimSuffix(string(b), "\n")
	if validOwner(label) != nil {
		return "", fmt.Errorf("spool: %s: %w", filepath.Join(dir, ownerName), ErrCorrupt)
	}
	return label, nil
}

func validOwner(label string) error {
	if label == "" || len(label) > MaxOwner || !utf8.ValidString(label) || strings.ContainsAny(label, "\n\x00") {
		return ErrOwner
	}
	return nil
}

// writeOwner atomically replaces dir's owner with label (temp file, fsync,
// rename, fsync of the directory).
func writeOwner(dir string, dirFile *os.File, label string) error {
	tmp := filepath.Join(dir, ownerTmpName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: owner: %w", err)
	}
	_, err = f.WriteString(label + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, ownerName))
	}
	if err == nil {
		err = dirFile.Sync()
	}
	if err != nil {
		return fmt.Errorf("spool: owner: %w", err)
	}
	return nil
}

// Owner returns the label SetOwner stored in the spool, "" if none.
func (s *Spool) Owner() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owner
}

// SetOwner stores label as the spool's owner, durably, replacing the one
// before it.
func (s *Spool) SetOwner(label string) error {
	if err := validOwner(label); err != nil {
		return err
	}
	s.relMu.Lock() // dirFile stays open
	defer s.relMu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	if err := writeOwner(s.dir, s.dirFile, label); err != nil {
		return err
	}
	s.mu.Lock()
	s.owner = label
	s.mu.Unlock()
	return nil
}
