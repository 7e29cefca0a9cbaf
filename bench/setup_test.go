package bench

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/tollgated/tollgated/core"
)

const t0 = int64(1_700_000_000e9)

// costs is one cost table shared by every benchmark account, the way a
// policy template is shared in practice; snapshots are still per account.
var costs = core.CostTable{
	Classes: []core.OpClass{
		{Name: "input_tokens", Weight: 1},
		{Name: "output_tokens", Weight: 4},
		{Name: "requests", Weight: 10},
		{Name: "images", Weight: 400},
	},
	Fixed:   1,
	Minimum: 5,
}

// workload is a four-class request, like an LLM call.
var workload = []core.WorkItem{{Op: 0, Count: 1200}, {Op: 1, Count: 300}, {Op: 2, Count: 1}, {Op: 3, Count: 1}}

func snapshot(id core.AccountID) *core.Snapshot {
	return &core.Snapshot{
		Account:     id,
		Generation:  1,
		Permissions: 1,
		Limits: core.Limits{
			MaxItems:      4096,
			RequestRate:   1 << 30,
			RequestBurst:  1 << 30,
			UnitRate:      1 << 31,
			UnitBurst:     1 << 31,
			MaxConcurrent: 1024,
			HoldTimeout:   30e9,
		},
		Costs: costs,
		Scope: core.ScopeAgent,
	}
}

// engineWith returns an engine holding n funded accounts and their
// principals, in a random order so lookups do not walk memory in sequence.
func engineWith(tb testing.TB, n int, gate *core.Gate) (*core.Engine, []core.Principal) {
	tb.Helper()
	e := core.NewEngine(core.Config{MaxReservations: 1 << 12, Gate: gate})
	ps := make([]core.Principal, n)
	for i := range n {
		id := core.AccountID("acct-" + strconv.Itoa(i))
		if err := e.Install(snapshot(id)); err != nil {
			tb.Fatal(err)
		}
		if err := e.GrantLease(id, 1, 1<<50, t0+1<<50, 0); err != nil {
			tb.Fatal(err)
		}
		ps[i] = core.Principal{Hi: rand.Uint64(), Lo: uint64(i)}
		if err := e.Bind(ps[i], id); err != nil {
			tb.Fatal(err)
		}
	}
	rand.Shuffle(n, func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	runtime.GC() // finish marking the set-up garbage before anything is timed
	return e, ps
}

// fullPath runs one request through every stage and bills it.
func fullPath(tb testing.TB, e *core.Engine, p core.Principal, slot core.UsageSlot, now int64) {
	ctx, reason := e.Begin(p, 1, now)
	if reason.Denied() {
		tb.Fatal(reason)
	}
	r, d := e.Admit(&ctx, workload, slot, now)
	if d.Denied() {
		tb.Fatal(d)
	}
	if err := e.AcquireCapacity(r); err != nil {
		tb.Fatal(err)
	}
	if err := e.Commit(r, core.RequestID{Lo: uint64(now)}, now); err != nil {
		tb.Fatal(err)
	}
	if _, err := e.Finish(r, 1000, now); err != nil {
		tb.Fatal(err)
	}
}
