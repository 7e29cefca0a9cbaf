//go:build race

package ring

// raceEnabled scales stress tests down: the race detector makes every atomic
// access and slot copy one to two orders of magnitude slower.
const raceEnabled = true
