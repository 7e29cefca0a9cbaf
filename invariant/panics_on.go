//go:build invariants

package invariant

// Panics says whether Violated panics: this build has the `invariants`
// tag, which `make test` (and make sim and make fuzz) build with.
const Panics = true
