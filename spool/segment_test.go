package spool

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSegName(t *testing.T) {
	for _, v := range []uint64{1, 52113, 1<<64 - 1} {
		name := segName(v)
		if len(name) != segNameBytes {
			t.Fatalf("segName(%d) = %q", v, name)
		}
		if got, ok := parseSegName(name); !ok || got != v {
			t.Fatalf("parseSegName(%q) = %d, %v", name, got, ok)
		}
	}
	if segName(9) >= segName(10) {
		t.Fatal("names do not sort like numbers")
	}
	for _, bad := range []string{"1.seg", "0000000000000000000x.seg", "00000000000000000000.seg",
		"00000000000000000001.sex", "99999999999999999999.seg"} {
		if _, ok := parseSegName(bad); ok {
			t.Errorf("parseSegName(%q) accepted", bad)
		}
	}
}

func TestListSegments(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []uint64{300, 1, 20} {
		os.WriteFile(segPath(dir, v), nil, 0o600)
	}
	os.WriteFile(filepath.Join(dir, "LOCK"), nil, 0o600)
	got, err := listSegments(dir)
	if err != nil || !slices.Equal(got, []uint64{1, 20, 300}) {
		t.Fatalf("listSegments = %v, %v", got, err)
	}
	os.WriteFile(filepath.Join(dir, "junk.seg"), nil, 0o600)
	if _, err := listSegments(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("junk.seg: err = %v, want ErrCorrupt", err)
	}
}
