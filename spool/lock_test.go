//go:build unix

package spool

import (
	"errors"
	"testing"
)

func TestLockExcludesSecondOpen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s2.Close()
}

func TestLockDirDirect(t *testing.T) {
	dir := t.TempDir()
	f, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lockDir: %v", err)
	}
	if err := unlockDir(f); err != nil {
		t.Fatal(err)
	}
	f, err = lockDir(dir)
	if err != nil {
		t.Fatalf("lockDir after unlock: %v", err)
	}
	unlockDir(f)
}
