package sim

import (
	"flag"
	"testing"
)

var (
	seeds = flag.Int("sim.seeds", 3, "how many seeds TestSimulation runs (make sim SEEDS=N)")
	first = flag.Uint64("sim.seed", 1, "the first seed (a failing run names its seed: replay it with -sim.seed=S -sim.seeds=1)")
	steps = flag.Int("sim.steps", 0, "steps per run (0: the default)")
)

// TestSimulation runs seeded simulations of a node under random traffic,
// administration and faults; see the package comment for what each checks.
func TestSimulation(t *testing.T) {
	for s := range uint64(*seeds) {
		seed := *first + s
		t.Run("seed", func(t *testing.T) {
			cfg := DefaultConfig(seed, t.TempDir())
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
