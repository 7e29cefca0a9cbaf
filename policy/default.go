package policy

// DefaultMaxItems is the default policy's items-per-request ceiling.
const DefaultMaxItems = 1_000_000_000

// Default is the policy of an account that has none stored:
//
//	{"permissions":["default"], "operations":{"units":{"weight":1}},
//	 "fixed_cost":0, "minimum_cost":0,
//	 "limits":{"max_items":1000000000, "hold_timeout_ms":30000, every rate and
//	           concurrency limit 0 (none)},
//	 "mode":"strict", "overage_cap":0, "deny_threshold":0}
//
// A caller prices work as a count of "units", one cost unit each, and is
// limited only by its funding. It passes core.Snapshot.Validate because the
// worst-case quote (1 × 1e9) is checked against unit_burst only when a unit
// rate is set, and the default sets none; a 1e9 ceiling keeps one request's
// quote far below any overflow while never being the limit that bites.
// It grants the one permission it names, "default": a data-plane request
// that names no permission or names "default" passes, and one that names
// another is refused until the operator PUTs a policy granting it.
func Default() *Document {
	return &Document{
		Permissions: []string{"default"},
		Operations:  map[string]Operation{"units": {Weight: 1}},
		Limits:      Limits{MaxItems: DefaultMaxItems, HoldTimeoutMS: DefaultHoldTimeoutMS},
		Mode:        ModeStrict,
	}
}
