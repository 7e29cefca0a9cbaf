//go:build linux && !race

package httploop

const raceEnabled = false
