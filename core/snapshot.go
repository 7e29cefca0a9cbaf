package core

import (
	"errors"
	"fmt"
	"math"
)

// Status is an account's standing. Closed is terminal.
type Status uint8

const (
	StatusActive Status = iota
	StatusSuspended
	StatusClosed
)

var statusLabels = [...]string{"active", "suspended", "closed"}

func (s Status) String() string {
	if int(s) < len(statusLabels) {
		return statusLabels[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// CapacityClass decides whether an account may use the execution capacity
// reserve. Assured may; BestEffort may not.
type CapacityClass uint8

const (
	CapacityAssured CapacityClass = iota
	CapacityBestEffort
)

// EnforcementMode says what happens when no lease funds a quote. Strict
// refuses. Elastic admits past the lease from a per-engine overage budget of
// at most OverageCap units, billed like any usage.
type EnforcementMode struct {
	Elastic    bool
	OverageCap CostUnits
}

// Limits bound what one request and one account may do. A zero rate or
// ceiling means "no limit of that kind".
type Limits struct {
	MaxItems               uint64 // items (Σ counts) per request; required
	RequestRate            uint32 // requests per second
	RequestBurst           uint32
	UnitRate               uint32 // cost units per second
	UnitBurst              uint32
	MaxConcurrent          uint32 // in-flight reservations per account
	PrincipalMaxConcurrent uint32 // in-flight reservations per principal
	// HoldTimeout is the default time a reservation may live, pending or
	// committed, before Expire releases it (pending) or bills it (committed).
	HoldTimeout int64
}

// MaxHoldTimeout bounds how long any reservation may be held.
const MaxHoldTimeout = int64(24 * 3600 * 1e9)

// Snapshot is an immutable, versioned view of an account's policy. The
// engine never modifies one after Install; replacing it means installing a
// new one with a higher generation. Requests pin the snapshot they began
// under, so a republication mid-request cannot change their answer.
//
// Field order is deliberate: what every request reads comes first, so the
// engine's per-account copy keeps it on the fewest cache lines.
type Snapshot struct {
	Status      Status
	Capacity    CapacityClass
	ValidUntil  int64 // Unix ns; 0 means the snapshot does not expire
	Permissions PermissionSet
	Limits      Limits
	Costs       CostTable
	Mode        EnforcementMode
	Generation  uint64
	Revision    PolicyRevision
	Account     AccountID
	// Scope is the level this account occupies in its hierarchy, reported
	// with funding refusals that the account's own ledger entry caused.
	Scope Scope
	// PermissionNames names permission bit i, for transports that accept
	// names on the wire. The engine itself only tests bits.
	PermissionNames []string
	// Ancestors are the account's parent, grandparent, … (seed 000 checks
	// a caller's Org-Id and Workspace-Id against them).
	Ancestors []AccountID
	// DenyThreshold: seed-000 admission denies while the account's funding
	// evidence shows less than this remaining.
	DenyThreshold CostUnits
	// Routes is compiled policy the engine never reads: the account's
	// forward-auth route table (a *route.Table), for the data plane's
	// gateway route. It rides with the snapshot so that prices and routes
	// change together; it is an interface so that core knows nothing of
	// HTTP. nil when the policy has no routes.
	Routes any
}

// Permission returns the bit named name, if the snapshot names one.
func (s *Snapshot) Permission(name []byte) (PermissionSet, bool) {
	for i, n := range s.PermissionNames {
		if n == string(name) {
			return 1 << i, true
		}
	}
	return 0, false
}

// OpIndexOf returns the index of the operation class named name.
func (s *Snapshot) OpIndexOf(name []byte) (OpIndex, bool) {
	for i := range s.Costs.Classes {
		if s.Costs.Classes[i].Name == string(name) {
			return OpIndex(i), true
		}
	}
	return 0, false
}

// ErrInvalidSnapshot wraps every reason Validate refuses a snapshot.
var ErrInvalidSnapshot = errors.New("core: invalid snapshot")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSnapshot}, args...)...)
}

// Validate refuses a snapshot that could not be enforced as written. In
// particular the worst-case quote (largest weight × MaxItems plus Fixed, or
// Minimum) must fit the weighted burst: otherwise some valid-looking request
// could never be admitted, and would be reported as rate limited forever.
func (s *Snapshot) Validate() error {
	if err := s.Account.Validate(); err != nil {
		return invalid("%v", err)
	}
	if s.Generation == 0 {
		return invalid("generation must be positive")
	}
	if s.Status > StatusClosed {
		return invalid("unknown status %d", s.Status)
	}
	if s.Capacity > CapacityBestEffort {
		return invalid("unknown capacity class %d", s.Capacity)
	}
	if s.Scope > ScopeOrg {
		return invalid("unknown scope %d", s.Scope)
	}
	if err := s.Limits.validate(); err != nil {
		return err
	}
	if n := len(s.Costs.Classes); n == 0 || n > MaxOpClasses {
		return invalid("cost table needs 1..%d operation classes, has %d", MaxOpClasses, n)
	}
	worst, err := s.Costs.worstCase(s.Limits.MaxItems)
	if err != nil {
		return invalid("worst-case quote overflows")
	}
	if s.Limits.UnitRate != 0 && worst > CostUnits(s.Limits.UnitBurst) {
		return invalid("worst-case quote %d exceeds unit burst %d", worst, s.Limits.UnitBurst)
	}
	if len(s.PermissionNames) > 64 {
		return invalid("at most 64 permission names")
	}
	if worst == 0 {
		return invalid("every request would be free; give a class a weight or set a minimum")
	}
	return nil
}

func (l *Limits) validate() error {
	if l.MaxItems == 0 {
		return invalid("max items per request must be positive")
	}
	if (l.RequestRate == 0) != (l.RequestBurst == 0) {
		return invalid("request rate and burst must be set together")
	}
	if (l.UnitRate == 0) != (l.UnitBurst == 0) {
		return invalid("unit rate and burst must be set together")
	}
	if l.PrincipalMaxConcurrent != 0 && (l.MaxConcurrent == 0 || l.PrincipalMaxConcurrent > l.MaxConcurrent) {
		return invalid("principal concurrency needs an account ceiling at least as large")
	}
	if l.HoldTimeout <= 0 || l.HoldTimeout > MaxHoldTimeout {
		return invalid("hold timeout must be in (0, %d] ns", MaxHoldTimeout)
	}
	if l.MaxConcurrent > math.MaxInt32 {
		return invalid("max concurrent too large")
	}
	return nil
}
