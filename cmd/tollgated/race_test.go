//go:build race

package main

// raceEnabled: the daemon the tests start is this test binary, so under
// -race it is instrumented, and every wake-up of an idle loop costs
// several times its real CPU.
const raceEnabled = true
