package credential

import "testing"

func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER abc", "abc", true},
		{"BeArEr   abc  ", "abc", true},
		{"Bearer abc\t", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer    ", "", false},
		{"Bearerabc", "", false},
		{"Bearer\tabc", "", false},
		{"Basic abc", "", false},
		{"Bearer a b", "", false},
		{"Bearer ab\x00c", "", false},
		{"Bearer ab\xffc", "", false},
		{"Bearex abc", "", false},
		{"", "", false},
	} {
		got, ok := BearerToken([]byte(c.in))
		if ok != c.ok || string(got) != c.want {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestBearerTokenAllocatesNothing(t *testing.T) {
	h := []byte("Bearer some-key-0123456789")
	if n := testing.AllocsPerRun(100, func() { BearerToken(h) }); n != 0 {
		t.Fatalf("BearerToken allocates %v times", n)
	}
}
