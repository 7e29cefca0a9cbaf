package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Compiled is an account's policy ready for the data plane.
type Compiled struct {
	Snapshot *core.Snapshot
	// DenyThreshold is the document's deny_threshold, for the seed-000
	// admission answer; the engine does not enforce it.
	DenyThreshold core.CostUnits
	// Window names the account's budget period for seed-000 answers:
	// "daily", "weekly", "monthly", or "" when it has none.
	Window string
}

// Compile builds acct's snapshot from its stored policy, or from Default()
// when it has none. The snapshot carries the account's ledger state (status,
// capacity class, scope) at acct.PolicyGeneration, which must be positive:
// the ledger bumps it on every policy, status or capacity change, and the
// data plane orders snapshots by it.
//
// Revision is SHA-256 over the canonical policy bytes followed by the
// generation as 8 big-endian bytes. Re-encoding first means a policy stored
// by an older encoder gets the same revision as its canonical form; adding
// the generation means a status change (same policy, new generation) is a
// new revision, so usage events name exactly the snapshot they ran under.
func Compile(acct ledger.Account) (*Compiled, error) {
	doc := Default()
	if len(acct.Policy) > 0 {
		var err error
		if doc, err = Parse(acct.Policy); err != nil {
			return nil, fmt.Errorf("policy: account %s: stored policy: %w", acct.ID, err)
		}
	}
	snap := doc.snapshot()
	snap.Account = acct.ID
	snap.Generation = acct.PolicyGeneration
	snap.Status = acct.Status
	snap.Capacity = acct.Capacity
	snap.Scope = acct.Scope
	snap.Revision = Revision(Canonical(doc), acct.PolicyGeneration)
	snap.DenyThreshold = doc.DenyThreshold
	if err := snap.Validate(); err != nil {
		return nil, fmt.Errorf("policy: account %s generation %d: %w", acct.ID, acct.PolicyGeneration, err)
	}
	return &Compiled{Snapshot: snap, DenyThreshold: doc.DenyThreshold, Window: acct.Budget.Period.Window()}, nil
}

// Revision is the policy revision of canonical policy bytes at generation.
func Revision(canonical []byte, generation uint64) core.PolicyRevision {
	h := sha256.New()
	h.Write(canonical)
	h.Write(binary.BigEndian.AppendUint64(nil, generation))
	var r core.PolicyRevision
	h.Sum(r[:0])
	return r
}

// snapshot is the document's part of a snapshot: permissions, costs,
// limits and mode. The account's part is the caller's.
func (d *Document) snapshot() *core.Snapshot {
	names := d.opNames()
	classes := make([]core.OpClass, len(names))
	for i, n := range names {
		op := d.Operations[n]
		classes[i] = core.OpClass{Name: n, Weight: op.Weight, Permission: d.bit(op.Permission)}
	}
	l := &d.Limits
	var routes any
	if t, err := d.table(); err != nil {
		// Parse validated the routes: a document that reaches here compiles.
		panic("policy: routes of a validated document: " + err.Error())
	} else if t != nil {
		routes = t
	}
	return &core.Snapshot{
		// The account is granted every permission its policy names;
		// naming a permission is how an operator grants it.
		Permissions: core.PermissionSet(1<<len(d.Permissions) - 1),
		Limits: core.Limits{
			MaxItems:               l.MaxItems,
			RequestRate:            l.RequestRate,
			RequestBurst:           l.RequestBurst,
			UnitRate:               l.UnitRate,
			UnitBurst:              l.UnitBurst,
			MaxConcurrent:          l.MaxConcurrent,
			PrincipalMaxConcurrent: l.PrincipalMaxConcurrent,
			HoldTimeout:            l.HoldTimeoutMS * 1e6,
		},
		Costs:           core.CostTable{Classes: classes, Fixed: d.FixedCost, Minimum: d.MinimumCost},
		Mode:            core.EnforcementMode{Elastic: d.Mode == ModeElastic, OverageCap: d.OverageCap},
		PermissionNames: append([]string(nil), d.Permissions...),
		Routes:          routes,
	}
}

// bit is the permission bit named name; 0 for "" (no extra permission).
func (d *Document) bit(name string) core.PermissionSet {
	for i, p := range d.Permissions {
		if p == name {
			return 1 << i
		}
	}
	return 0
}
