package core

// policy is the part of a snapshot the request path reads. The engine keeps
// one copy inside each account (hot) and one on the heap that requests pin.
// It fits two cache lines (TestPolicyIsTwoCacheLines); the elastic flag
// shares the status word, and what only rare paths need (the generation,
// the overage cap) is read through src.
type policy struct {
	Status      Status
	Capacity    CapacityClass
	Elastic     bool
	ValidUntil  int64
	Permissions PermissionSet
	Limits      Limits
	Costs       CostTable
	// src is the snapshot this was compiled from, passed on with usage
	// events; the request path never reads through it.
	src *Snapshot
}

func compilePolicy(s *Snapshot) policy {
	return policy{
		Status: s.Status, Capacity: s.Capacity, ValidUntil: s.ValidUntil, Permissions: s.Permissions,
		Limits: s.Limits, Costs: s.Costs, Elastic: s.Mode.Elastic, src: s,
	}
}
