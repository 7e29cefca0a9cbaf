package spool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestMarkRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if m, err := readMark(dir); err != nil || m != 0 {
		t.Fatalf("missing mark: %d, %v", m, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, v := range []uint64{1, 12345, 1<<64 - 1} {
		if err := writeMark(dir, d, v); err != nil {
			t.Fatal(err)
		}
		if m, err := readMark(dir); err != nil || m != v {
			t.Fatalf("readMark = %d, %v; want %d", m, err, v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, markTmpName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp mark left behind: %v", err)
	}
}

func TestMarkCorrupt(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := writeMark(dir, d, 99); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, markName)
	b, _ := os.ReadFile(path)
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		os.WriteFile(path, c, 0o600)
		if _, err := readMark(dir); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip in byte %d: err = %v, want ErrCorrupt", i, err)
		}
	}
	os.WriteFile(path, b[:len(b)-1], 0o600)
	if _, err := readMark(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short mark: err = %v, want ErrCorrupt", err)
	}
}
