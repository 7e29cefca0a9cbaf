package sim

import (
	"flag"
	"fmt"
	"testing"
)

var (
	seeds = flag.Int("sim.seeds", 3, "how many seeds each simulation test runs (make sim SEEDS=N)")
	first = flag.Uint64("sim.seed", 1, "the first seed (a failing run names its seed: replay it with -sim.seed=S -sim.seeds=1)")
	steps = flag.Int("sim.steps", 0, "steps per run (0: the default)")
)

// TestSimulation runs seeded simulations of one node under random traffic,
// administration and faults; see the package comment for what each checks.
func TestSimulation(t *testing.T) { run(t, func(c *Config) {}) }

// TestSimulationOfAFleet runs three nodes of two shards each on one
// ledger: the last units of an account split over their leases, a node's
// crash or lost volume beside live ones, ledger outages longer than a
// lease.
func TestSimulationOfAFleet(t *testing.T) {
	run(t, func(c *Config) { c.Nodes, c.Shards, c.Steps = 3, 2, c.Steps/2 })
}

func run(t *testing.T, adjust func(*Config)) {
	for s := range uint64(*seeds) {
		seed := *first + s
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig(seed, t.TempDir())
			adjust(&cfg)
			if *steps > 0 {
				cfg.Steps = *steps
			}
			if testing.Short() {
				cfg.Steps /= 4
			}
			w := New(cfg, func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
			}, t.Logf)
			defer w.Close()
			st := w.Run()
			t.Logf("seed %d: %s", seed, st)
		})
	}
}
