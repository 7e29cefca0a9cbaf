package core

import (
	"strings"
	"testing"
)

func TestAccountIDValidate(t *testing.T) {
	good := []AccountID{"a", "acme", "org-7.ws_3", "0", AccountID(strings.Repeat("x", MaxAccountIDLen))}
	for _, id := range good {
		if err := id.Validate(); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	bad := []AccountID{"", "-a", ".a", "A", "a b", "a/b", "é", AccountID(strings.Repeat("x", MaxAccountIDLen+1))}
	for _, id := range bad {
		if err := id.Validate(); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}

func TestPermissionSetHas(t *testing.T) {
	s := PermissionSet(0b1011)
	if !s.Has(0) || !s.Has(0b1) || !s.Has(0b1010) || !s.Has(0b1011) {
		t.Fatal("containment refused")
	}
	if s.Has(0b0100) || s.Has(0b1111) {
		t.Fatal("missing permission accepted")
	}
}

func TestHexSpellings(t *testing.T) {
	id := RequestID{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210}
	if got := string(id.AppendHex(nil)); got != "0123456789abcdeffedcba9876543210" {
		t.Fatalf("request id hex = %s", got)
	}
	var r PolicyRevision
	r[0], r[31] = 0xab, 0x01
	got := string(r.AppendHex([]byte("x")))
	if len(got) != 65 || got[:3] != "xab" || got[63:] != "01" {
		t.Fatalf("revision hex = %s", got)
	}
}
