package decimal

import (
	"strconv"
	"testing"
)

func TestUint(t *testing.T) {
	for in, want := range map[string]uint64{
		"0": 0, "7": 7, "0042": 42, "4294967296": 1 << 32,
		"9999999999999999999": 9999999999999999999,
	} {
		if n, ok := Uint([]byte(in)); !ok || n != want {
			t.Errorf("%q: %d %v, want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "+1", " 1", "1 ", "1_000", "0x10", "1.5", "١", "10000000000000000000"} {
		if n, ok := Uint([]byte(in)); ok {
			t.Errorf("%q read as %d", in, n)
		}
	}
}

func TestUintAllocatesNothing(t *testing.T) {
	b := []byte("123456789")
	if n := testing.AllocsPerRun(100, func() { Uint(b); Uint(b[:0]); Uint([]byte("x")) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// FuzzUint: Uint reads what strconv reads as a base-10 uint64 of at most
// MaxDigits characters with no sign or underscore, to the same value, and
// nothing else.
func FuzzUint(f *testing.F) {
	for _, s := range []string{"0", "12", "+1", "-0", "1_0", "18446744073709551615", "9999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := Uint([]byte(s))
		want, err := strconv.ParseUint(s, 10, 64)
		plain := err == nil && len(s) <= MaxDigits && s[0] != '+'
		if ok != plain || ok && n != want {
			t.Fatalf("%q: %d %v; strconv %d %v", s, n, ok, want, err)
		}
	})
}
