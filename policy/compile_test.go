package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

func account(policy string, gen uint64) ledger.Account {
	return ledger.Account{
		AccountSpec:      ledger.AccountSpec{ID: "acme", Parent: "org", Capacity: core.CapacityBestEffort},
		Scope:            core.ScopeWorkspace,
		Status:           core.StatusSuspended,
		Policy:           []byte(policy),
		PolicyGeneration: gen,
		Budget:           ledger.Budget{Allowance: 10, Period: ledger.PeriodWeek},
	}
}

func TestCompileExample(t *testing.T) {
	doc := `{"permissions":["chat","embed"],
		"operations":{"requests":{"weight":10},"input_tokens":{"weight":1,"permission":"embed"}},
		"fixed_cost":3,"minimum_cost":5,
		"limits":{"max_items":100,"request_rate":10,"request_burst":20,"unit_rate":100,"unit_burst":1003,
		          "max_concurrent":8,"principal_max_concurrent":2,"hold_timeout_ms":1500},
		"mode":"elastic","overage_cap":50,"deny_threshold":7}`
	c, err := Compile(account(doc, 4))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Snapshot
	if s.Account != "acme" || s.Generation != 4 || s.Status != core.StatusSuspended ||
		s.Capacity != core.CapacityBestEffort || s.Scope != core.ScopeWorkspace {
		t.Fatalf("account fields: %+v", s)
	}
	if s.Permissions != 0b11 || len(s.PermissionNames) != 2 || s.PermissionNames[1] != "embed" {
		t.Fatalf("permissions %b %v", s.Permissions, s.PermissionNames)
	}
	// Classes are in sorted name order, whatever the document's order.
	want := []core.OpClass{{Name: "input_tokens", Weight: 1, Permission: 0b10}, {Name: "requests", Weight: 10}}
	if len(s.Costs.Classes) != 2 || s.Costs.Classes[0] != want[0] || s.Costs.Classes[1] != want[1] {
		t.Fatalf("classes %+v", s.Costs.Classes)
	}
	if i, ok := s.OpIndexOf([]byte("requests")); !ok || i != 1 {
		t.Fatalf("OpIndexOf(requests) = %d %v", i, ok)
	}
	if s.Costs.Fixed != 3 || s.Costs.Minimum != 5 {
		t.Fatalf("costs %+v", s.Costs)
	}
	wantLimits := core.Limits{MaxItems: 100, RequestRate: 10, RequestBurst: 20, UnitRate: 100, UnitBurst: 1003,
		MaxConcurrent: 8, PrincipalMaxConcurrent: 2, HoldTimeout: 1_500_000_000}
	if s.Limits != wantLimits {
		t.Fatalf("limits %+v", s.Limits)
	}
	if s.Mode != (core.EnforcementMode{Elastic: true, OverageCap: 50}) {
		t.Fatalf("mode %+v", s.Mode)
	}
	if c.DenyThreshold != 7 || c.Snapshot.DenyThreshold != 7 || c.Window != "weekly" {
		t.Fatalf("deny threshold %d window %q", c.DenyThreshold, c.Window)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRevisionIsCanonicalBytesAndGeneration(t *testing.T) {
	a, err := Compile(account(example, 2))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := Parse([]byte(example))
	h := sha256.New()
	h.Write(Canonical(d))
	h.Write(binary.BigEndian.AppendUint64(nil, 2))
	if got := a.Snapshot.Revision; string(got[:]) != string(h.Sum(nil)) {
		t.Fatal("revision is not SHA-256(canonical || generation)")
	}
	// The same policy written differently has the same revision...
	b, err := Compile(account(string(Canonical(d)), 2))
	if err != nil {
		t.Fatal(err)
	}
	if a.Snapshot.Revision != b.Snapshot.Revision {
		t.Fatal("revision depends on formatting")
	}
	// ...and a new generation (say, a status change) is a new revision.
	c, err := Compile(account(example, 3))
	if err != nil {
		t.Fatal(err)
	}
	if a.Snapshot.Revision == c.Snapshot.Revision {
		t.Fatal("revision ignores the generation")
	}
}

func TestCompileWithoutPolicyUsesDefault(t *testing.T) {
	c, err := Compile(account("", 1))
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshot.Costs.Classes[0].Name != "units" || c.Snapshot.PermissionNames[0] != "default" {
		t.Fatalf("not the default policy: %+v", c.Snapshot)
	}
	if c.Snapshot.Revision != Revision(Canonical(Default()), 1) {
		t.Fatal("default policy revision")
	}
}

func TestCompileRefuses(t *testing.T) {
	if _, err := Compile(account(`{"limits":{}}`, 1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad stored policy: %v", err)
	}
	if _, err := Compile(account("", 0)); !errors.Is(err, core.ErrInvalidSnapshot) {
		t.Fatalf("generation 0: %v", err)
	}
	a := account("", 1)
	a.ID = "Not Valid"
	if _, err := Compile(a); !errors.Is(err, core.ErrInvalidSnapshot) {
		t.Fatalf("bad account id: %v", err)
	}
}

func TestWindowNames(t *testing.T) {
	for p, want := range map[ledger.Period]string{
		ledger.PeriodNone: "", ledger.PeriodDay: "daily", ledger.PeriodWeek: "weekly", ledger.PeriodMonth: "monthly",
	} {
		a := account("", 1)
		a.Budget.Period = p
		c, err := Compile(a)
		if err != nil {
			t.Fatal(err)
		}
		if c.Window != want {
			t.Errorf("period %d: window %q, want %q", p, c.Window, want)
		}
	}
}

func TestCompiledSnapshotsShareNothing(t *testing.T) {
	// A snapshot is immutable once installed: two compilations must not
	// share slices a later edit of one could reach through the other.
	a, _ := Compile(account(example, 1))
	b, _ := Compile(account(example, 1))
	a.Snapshot.PermissionNames[0] = "x"
	a.Snapshot.Costs.Classes[0].Weight = 99
	if b.Snapshot.PermissionNames[0] != "chat" || b.Snapshot.Costs.Classes[0].Weight != 1 {
		t.Fatal("compilations share memory")
	}
}
