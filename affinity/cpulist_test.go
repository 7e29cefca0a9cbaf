package affinity

import (
	"errors"
	"slices"
	"testing"
)

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"7", []int{7}},
		{"0-3", []int{0, 1, 2, 3}},
		{"0-3,6,8-9", []int{0, 1, 2, 3, 6, 8, 9}},
		{"8-9,0-1", []int{0, 1, 8, 9}},          // sorted
		{"1,1,1", []int{1}},                     // duplicates collapse
		{"0-4,2-6", []int{0, 1, 2, 3, 4, 5, 6}}, // overlaps collapse
		{"5-5", []int{5}},
		{"007", []int{7}},
		{"0-1\n", []int{0, 1}}, // as read from sysfs
		{"4095", []int{MaxCPU - 1}},
		{"4094-4095,0", []int{0, 4094, 4095}},
		{"63,64,127-128", []int{63, 64, 127, 128}}, // word boundaries
	}
	for _, tt := range tests {
		got, err := ParseList(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseListBad(t *testing.T) {
	for _, in := range []string{
		"",
		" ",
		",",
		"0,",
		",0",
		"0,,1",
		"-",
		"-1",
		"1-",
		"3-1",
		"1-2-3",
		"0 - 3",
		"0, 1",
		"+1",
		"a",
		"0x1",
		"1.5",
		"0-7:2",
		"4096",
		"0-4096",
		"99999999999999999999999",
		"１", // a non-ASCII digit
	} {
		got, err := ParseList(in)
		if !errors.Is(err, ErrSyntax) || got != nil {
			t.Errorf("ParseList(%q) = %v, %v; want ErrSyntax", in, got, err)
		}
	}
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0-3,6,8-9", "1,1", "4095", "3-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseList(s)
		if err != nil {
			return
		}
		if len(cpus) == 0 {
			t.Fatalf("ParseList(%q) accepted an empty list", s)
		}
		for i, c := range cpus {
			if c < 0 || c >= MaxCPU || (i > 0 && c <= cpus[i-1]) {
				t.Fatalf("ParseList(%q) = %v: out of range or order", s, cpus)
			}
		}
	})
}
