package spool

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDatasync(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := datasync(f); err != nil {
		t.Fatalf("datasync: %v", err)
	}
	f.Close()
	if err := datasync(f); err == nil {
		t.Fatal("datasync of a closed file succeeded")
	}
}
