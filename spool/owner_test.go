package spool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOwnerSurvivesRestartAndQuarantine: the label stored in a spool is
// read back by the next Open, replaced atomically, refused when it is not
// one line of text, and carried into the spool Quarantine rebuilds.
func TestOwnerSurvivesRestartAndQuarantine(t *testing.T) {
	dir := t.TempDir()
	opts := fillSpool(t, dir, 300)
	s := openT(t, dir, opts)
	if got := s.Owner(); got != "" {
		t.Fatalf("a spool without an owner: %q", got)
	}
	for _, bad := range []string{"", "two\nlines", string(make([]byte, MaxOwner+1)), "\xff"} {
		if err := s.SetOwner(bad); !errors.Is(err, ErrOwner) {
			t.Fatalf("SetOwner(%q) = %v", bad, err)
		}
	}
	if err := s.SetOwner("node-a 1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetOwner("node-a 2"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.SetOwner("node-a 3"); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetOwner after Close: %v", err)
	}
	s = openT(t, dir, opts)
	if got := s.Owner(); got != "node-a 2" {
		t.Fatalf("owner after a restart: %q", got)
	}
	s.Close()

	files := segFiles(t, dir)
	flipRecord(t, files[len(files)/2], 3)
	if _, err := Quarantine(dir, filepath.Join(t.TempDir(), "q")); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, opts)
	if got := s.Owner(); got != "node-a 2" {
		t.Fatalf("owner after a quarantine: %q", got)
	}
	s.Close()

	if err := os.WriteFile(filepath.Join(dir, ownerName), []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged owner: %v", err)
	}
}
