package affinity

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrSyntax is returned (wrapped) by ParseList for malformed input.
var ErrSyntax = errors.New("affinity: invalid CPU list")

// ParseList parses a CPU list in the kernel's cpulist format, the one in
// /sys/devices/system/cpu/online and taskset -c: comma-separated ids and
// inclusive ranges, as in "0-3,6,8-9". It returns the ids sorted, with
// duplicates and overlaps collapsed.
//
// Surrounding white space is trimmed, so a line read from sysfs parses as
// is. Spaces inside the list, an empty list, an empty element, a reversed range, a
// sign and any id >= MaxCPU are rejected, so that a typo in a flag fails at
// start rather than pinning shards somewhere unexpected. The kernel's stride
// form ("0-7:2") is not accepted.
func ParseList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrSyntax)
	}
	var seen [MaxCPU / 64]uint64
	for elem := range strings.SplitSeq(s, ",") {
		lo, hi := elem, elem
		if i := strings.IndexByte(elem, '-'); i >= 0 {
			lo, hi = elem[:i], elem[i+1:]
		}
		first, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrSyntax, elem, err)
		}
		last, err := parseCPU(hi)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrSyntax, elem, err)
		}
		if first > last {
			return nil, fmt.Errorf("%w %q: range is reversed", ErrSyntax, elem)
		}
		for cpu := first; cpu <= last; cpu++ {
			seen[cpu/64] |= 1 << (cpu % 64)
		}
	}
	var cpus []int
	for w, bits := range seen {
		for b := range 64 {
			if bits&(1<<b) != 0 {
				cpus = append(cpus, w*64+b)
			}
		}
	}
	return slices.Clip(cpus), nil
}

// parseCPU parses one CPU id: decimal digits only, below MaxCPU.
func parseCPU(s string) (int, error) {
	if s == "" {
		return 0, errors.New("missing CPU id")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a CPU id", s)
		}
	}
	n, err := strconv.Atoi(s) // digits only, so the one error is out of range
	if err != nil || n >= MaxCPU {
		return 0, fmt.Errorf("CPU %s is not below %d", s, MaxCPU)
	}
	return n, nil
}
