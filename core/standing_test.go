package core

import "testing"

func TestStandingFindsAnAccountByBytesWithoutAllocating(t *testing.T) {
	f := newFixture(t, nil)
	var cell EvidenceCell
	if err := f.e.SetEvidence(f.snap.Account, &cell); err != nil {
		t.Fatal(err)
	}
	id := []byte(f.snap.Account)
	snap, ev, ok := f.e.Standing(id)
	if !ok || snap != f.snap || ev != &cell {
		t.Fatalf("Standing(%s) = %p %p %v", id, snap, ev, ok)
	}
	if _, _, ok := f.e.Standing([]byte("nobody")); ok {
		t.Fatal("unknown account found")
	}
	if a := testing.AllocsPerRun(100, func() { f.e.Standing(id) }); a != 0 {
		t.Fatalf("Standing allocates %v", a)
	}
}
