package loadtest

import (
	"bytes"
	"strings"
	"testing"
)

func TestReadAccounts(t *testing.T) {
	in := "# comment\n\nacme k-1\n  beta   k-2  \n"
	got, err := ReadAccounts(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Account{{"acme", "k-1"}, {"beta", "k-2"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestReadAccountsErrors(t *testing.T) {
	for _, in := range []string{"", "# only\n", "acme\n", "a b c\n"} {
		if _, err := ReadAccounts(strings.NewReader(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestWriteAccountsRoundTrip(t *testing.T) {
	in := []Account{{"a", "k1"}, {"b", "k2"}}
	var buf bytes.Buffer
	if err := WriteAccounts(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadAccounts(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("round trip gave %v", out)
	}
}

func TestSyntheticAccounts(t *testing.T) {
	got, err := SyntheticAccounts(3, "acct-", []string{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Account{{"acct-0", "x"}, {"acct-1", "y"}, {"acct-2", "x"}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := SyntheticAccounts(0, "a", []string{"x"}); err == nil {
		t.Error("n=0 accepted")
	}
	if _, err := SyntheticAccounts(1, "a", nil); err == nil {
		t.Error("no keys accepted")
	}
}

func TestWireAccountsEscape(t *testing.T) {
	w := newWireAccounts([]Account{{ID: `a b&"c`, Key: "k"}})[0]
	if w.auth != "Bearer k" {
		t.Errorf("auth %q", w.auth)
	}
	if w.queryID != "a+b%26%22c" {
		t.Errorf("query id %q", w.queryID)
	}
	if string(w.jsonID) != `"a b&\"c"` {
		t.Errorf("json id %s", w.jsonID)
	}
}
