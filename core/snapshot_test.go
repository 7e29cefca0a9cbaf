package core

import (
	"errors"
	"testing"
)

func validSnapshot() *Snapshot {
	return &Snapshot{
		Account:     "acme",
		Generation:  1,
		Permissions: 0b11,
		Limits: Limits{
			MaxItems:    100,
			UnitRate:    100_000,
			UnitBurst:   200_000,
			HoldTimeout: 30e9,
		},
		Costs: testTable(),
		Scope: ScopeAgent,
	}
}

func TestValidateAcceptsAGoodSnapshot(t *testing.T) {
	if err := validSnapshot().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRefuses(t *testing.T) {
	cases := map[string]func(*Snapshot){
		"bad account":            func(s *Snapshot) { s.Account = "Bad" },
		"zero generation":        func(s *Snapshot) { s.Generation = 0 },
		"unknown status":         func(s *Snapshot) { s.Status = 9 },
		"zero max items":         func(s *Snapshot) { s.Limits.MaxItems = 0 },
		"rate without burst":     func(s *Snapshot) { s.Limits.RequestRate = 5 },
		"unit burst w/o rate":    func(s *Snapshot) { s.Limits.UnitRate = 0 },
		"principal > account":    func(s *Snapshot) { s.Limits.MaxConcurrent, s.Limits.PrincipalMaxConcurrent = 2, 3 },
		"principal w/o account":  func(s *Snapshot) { s.Limits.PrincipalMaxConcurrent = 1 },
		"no hold timeout":        func(s *Snapshot) { s.Limits.HoldTimeout = 0 },
		"no classes":             func(s *Snapshot) { s.Costs.Classes = nil },
		"worst case over burst":  func(s *Snapshot) { s.Limits.MaxItems = 1000 }, // 2+500*1000 > 200000
		"worst case overflows":   func(s *Snapshot) { s.Limits.MaxItems = 1 << 62 },
		"everything free":        func(s *Snapshot) { s.Costs = CostTable{Classes: []OpClass{{Name: "x"}}} },
		"unknown capacity class": func(s *Snapshot) { s.Capacity = 7 },
	}
	for name, mutate := range cases {
		s := validSnapshot()
		mutate(s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func TestWorstCaseAtExactlyTheBurstIsAccepted(t *testing.T) {
	s := validSnapshot()
	s.Limits.MaxItems = 100
	s.Limits.UnitBurst = uint32(2 + 500*100)
	if err := s.Validate(); err != nil {
		t.Fatalf("worst case == burst refused: %v", err)
	}
	s.Limits.UnitBurst--
	if err := s.Validate(); err == nil {
		t.Fatal("worst case == burst+1 accepted")
	}
}

func TestNameLookups(t *testing.T) {
	s := validSnapshot()
	s.PermissionNames = []string{"chat", "images"}
	if p, ok := s.Permission([]byte("images")); !ok || p != 0b10 {
		t.Fatalf("images = %b, %v", p, ok)
	}
	if _, ok := s.Permission([]byte("admin")); ok {
		t.Fatal("unknown permission found")
	}
	if i, ok := s.OpIndexOf([]byte("requests")); !ok || i != 2 {
		t.Fatalf("requests = %d, %v", i, ok)
	}
	if _, ok := s.OpIndexOf([]byte("video")); ok {
		t.Fatal("unknown class found")
	}
	if a := testing.AllocsPerRun(100, func() { s.OpIndexOf([]byte("images")) }); a != 0 {
		t.Fatalf("lookup allocates %v", a)
	}
}
