//go:build !invariants

package invariant

// Panics says whether Violated panics: not in this build, which has no
// `invariants` tag (the daemon's). A violation is counted and reported.
const Panics = false
