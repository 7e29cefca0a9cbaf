package policy

import (
	"bytes"
	"testing"

	"github.com/tollgated/tollgated/core"
)

func TestDefaultIsAValidDocument(t *testing.T) {
	d, err := Parse(Canonical(Default()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(Canonical(d), Canonical(Default())) {
		t.Fatal("Default is not in canonical form")
	}
}

func TestDefaultSnapshot(t *testing.T) {
	s := Default().snapshot()
	s.Account, s.Generation = "a", 1
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Limits.MaxItems != 1e9 || s.Limits.UnitRate != 0 || s.Limits.RequestRate != 0 || s.Limits.MaxConcurrent != 0 {
		t.Fatalf("default limits %+v", s.Limits)
	}
	if s.Mode.Elastic || s.Permissions != 1 || len(s.Costs.Classes) != 1 || s.Costs.Classes[0].Weight != 1 {
		t.Fatalf("default snapshot %+v", s)
	}
	q, r := s.Costs.Quote([]core.WorkItem{{Op: 0, Count: 42}})
	if r != core.DenyNone || q != 42 {
		t.Fatalf("42 units quote %d (%v)", q, r)
	}
}

func TestDefaultReturnsAFreshDocument(t *testing.T) {
	d := Default()
	d.Permissions[0] = "changed"
	d.Operations["units"] = Operation{Weight: 5}
	if e := Default(); e.Permissions[0] != "default" || e.Operations["units"].Weight != 1 {
		t.Fatal("Default shares state between calls")
	}
}
