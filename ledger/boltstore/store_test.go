package boltstore

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/ledgertest"
	"github.com/tollgated/tollgated/ledger"
)

// open is the conformance suite's opener: one file per directory.
func open(t *testing.T, dir string) ledger.Store {
	t.Helper()
	s, err := Open(filepath.Join(dir, "ledger.db"), Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, open)
}

// TestSecondOpenerFailsFast: bbolt locks the file; a second store on it
// gives up after OpenTimeout with ErrLocked instead of hanging.
func TestSecondOpenerFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	first, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	start := time.Now()
	second, err := Open(path, Options{})
	if err == nil {
		second.Close()
		t.Fatal("second opener succeeded")
	}
	if took := time.Since(start); !errors.Is(err, ErrLocked) || took > 3*OpenTimeout {
		t.Fatalf("second opener: %v after %s", err, took)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	third, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	third.Close()
}
