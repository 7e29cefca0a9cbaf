//go:build linux && race

package httploop

// raceEnabled skips allocation checks: the race detector allocates on its
// own (and makes sync.Pool drop items at random).
const raceEnabled = true
