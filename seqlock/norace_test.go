//go:build !race

package seqlock

const raceEnabled = false
