package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	segSuffix    = ".seg"
	segDigits    = 20 // enough for any uint64, so names sort like numbers
	segNameBytes = segDigits + len(segSuffix)
)

// segName is the file name of the segment whose first record is first.
func segName(first uint64) string {
	return fmt.Sprintf("%0*d%s", segDigits, first, segSuffix)
}

// segPath is the path of the segment whose first record is first.
func segPath(dir string, first uint64) string {
	return filepath.Join(dir, segName(first))
}

// parseSegName returns the first sequence number a segment file name
// carries; ok is false for names that are not segment names.
func parseSegName(name string) (first uint64, ok bool) {
	if len(name) != segNameBytes || !strings.HasSuffix(name, segSuffix) {
		return 0, false
	}
	digits := name[:segDigits]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	first, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || first == 0 {
		return 0, false
	}
	return first, true
}

// listSegments returns the first sequence numbers of the segment files in
// dir, in increasing order. A file that ends in ".seg" but is not a valid
// segment name is an error: someone put it there, or a name got damaged,
// and guessing would risk skipping records.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: list segments: %w", err)
	}
	var firsts []uint64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		first, ok := parseSegName(name)
		if !ok || !e.Type().IsRegular() {
			return nil, fmt.Errorf("spool: %s: not a segment file: %w", filepath.Join(dir, name), ErrCorrupt)
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	return firsts, nil
}
