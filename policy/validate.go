package policy

import (
	"math"
	"slices"
	"strconv"

	"github.com/tollgated/tollgated/core"
)

// probeAccount stands in for the account when Parse checks that a document
// compiles: everything Validate checks except the account's own fields
// depends on the document alone.
const probeAccount core.AccountID = "policy-probe"

// validate checks a normalised document field by field, so the error names
// what to fix, then compiles it against a probe account as a backstop: a
// document Parse accepts always compiles into a snapshot that validates.
func (d *Document) validate() error {
	if err := d.validatePermissions(); err != nil {
		return err
	}
	if err := d.validateOperations(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    core.CostUnits
	}{
		{"fixed_cost", d.FixedCost}, {"minimum_cost", d.MinimumCost},
		{"overage_cap", d.OverageCap}, {"deny_threshold", d.DenyThreshold},
	} {
		if f.v > MaxUnits {
			return fieldErr(f.name, "must be at most %d", MaxUnits)
		}
	}
	switch d.Mode {
	case ModeStrict:
		if d.OverageCap != 0 {
			return fieldErr("overage_cap", "must be 0 in strict mode (set mode to %q to allow overage)", ModeElastic)
		}
	case ModeElastic:
		if d.OverageCap == 0 {
			return fieldErr("overage_cap", "must be positive in elastic mode (an elastic policy with no overage is strict)")
		}
	default:
		return fieldErr("mode", "must be %q or %q, not %q", ModeStrict, ModeElastic, d.Mode)
	}
	if err := d.Limits.validate(); err != nil {
		return err
	}
	if err := d.validateWorstCase(); err != nil {
		return err
	}
	if _, err := d.table(); err != nil {
		return err
	}
	snap := d.snapshot()
	snap.Account, snap.Generation = probeAccount, 1
	if err := snap.Validate(); err != nil {
		return &FieldError{Problem: err.Error()}
	}
	return nil
}

func (d *Document) validatePermissions() error {
	if len(d.Permissions) > MaxPermissions {
		return fieldErr("permissions", "at most %d names, not %d", MaxPermissions, len(d.Permissions))
	}
	for i, p := range d.Permissions {
		field := "permissions[" + strconv.Itoa(i) + "]"
		if err := validName(p); err != "" {
			return fieldErr(field, "%s", err)
		}
		if slices.Index(d.Permissions, p) != i {
			return fieldErr(field, "%q is named twice", p)
		}
	}
	return nil
}

func (d *Document) validateOperations() error {
	if n := len(d.Operations); n == 0 || n > core.MaxOpClasses {
		return fieldErr("operations", "needs 1 to %d operation classes, not %d", core.MaxOpClasses, n)
	}
	for _, name := range d.opNames() {
		op := d.Operations[name]
		field := "operations." + name
		if err := validName(name); err != "" {
			return fieldErr(field, "%s", err)
		}
		if op.Weight > MaxUnits {
			return fieldErr(field+".weight", "must be at most %d", MaxUnits)
		}
		if op.Permission != "" && !slices.Contains(d.Permissions, op.Permission) {
			return fieldErr(field+".permission", "%q is not one of permissions", op.Permission)
		}
	}
	return nil
}

func (l *Limits) validate() error {
	switch {
	case l.MaxItems == 0:
		return fieldErr("limits.max_items", "is required and must be positive")
	case (l.RequestRate == 0) != (l.RequestBurst == 0):
		return fieldErr("limits.request_burst", "request_rate and request_burst must be set together")
	case (l.UnitRate == 0) != (l.UnitBurst == 0):
		return fieldErr("limits.unit_burst", "unit_rate and unit_burst must be set together")
	case l.MaxConcurrent > math.MaxInt32:
		return fieldErr("limits.max_concurrent", "must be at most %d", math.MaxInt32)
	case l.PrincipalMaxConcurrent != 0 && l.MaxConcurrent == 0:
		return fieldErr("limits.principal_max_concurrent", "needs limits.max_concurrent")
	case l.PrincipalMaxConcurrent > l.MaxConcurrent:
		return fieldErr("limits.principal_max_concurrent", "must not exceed limits.max_concurrent (%d)", l.MaxConcurrent)
	case l.HoldTimeoutMS < 0 || l.HoldTimeoutMS > MaxHoldTimeoutMS:
		return fieldErr("limits.hold_timeout_ms", "must be in [1, %d] (0 means %d)", MaxHoldTimeoutMS, DefaultHoldTimeoutMS)
	}
	return nil
}

// validateWorstCase mirrors core.Snapshot.Validate's quote check with field
// names: the largest quote (max weight × max_items + fixed_cost, or
// minimum_cost if larger) must not exceed MaxUnits, must not be zero, and must fit
// unit_burst when a unit rate is set — otherwise that request could never
// be admitted and would look rate limited forever. With no unit rate there
// is no burst to fit.
func (d *Document) validateWorstCase() error {
	var w core.CostUnits
	for _, op := range d.Operations {
		w = max(w, op.Weight)
	}
	m, err := w.Mul(d.Limits.MaxItems)
	if err == nil {
		m, err = d.FixedCost.Add(m)
	}
	if err != nil || m > MaxUnits {
		// A quote beyond MaxUnits could be billed in amounts the ledger
		// cannot store, so such a policy is refused, not just one request.
		return fieldErr("limits.max_items", "largest weight × max_items + fixed_cost exceeds %d", MaxUnits)
	}
	worst := max(m, d.MinimumCost)
	if worst == 0 {
		return fieldErr("operations", "every request would be free: give a class a weight or set minimum_cost")
	}
	if d.Limits.UnitRate != 0 && worst > core.CostUnits(d.Limits.UnitBurst) {
		return fieldErr("limits.unit_burst", "the largest possible quote %d (largest weight × max_items + fixed_cost, or minimum_cost) exceeds unit_burst %d", worst, d.Limits.UnitBurst)
	}
	return nil
}

// validName reports what is wrong with a permission or class name, or "".
func validName(s string) string {
	if len(s) == 0 || len(s) > MaxNameLen {
		return "names are 1 to 64 bytes"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return "names use only a-z, 0-9, '_', '.' and '-'"
		}
	}
	return ""
}

// opNames is the operation class names in sorted order: the OpIndex order.
func (d *Document) opNames() []string {
	names := make([]string, 0, len(d.Operations))
	for n := range d.Operations {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
