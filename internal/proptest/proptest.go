// Package proptest sets how deep the project's property tests (pgregory.net/rapid) explore.
package proptest

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Main raises rapid's default of 100 cases per property to checks (short
// under -short), then runs the tests and exits. Pure state machines are
// fast, so random sequences can explore deep interleavings on every run;
// an explicit -rapid.checks on the command line wins.
func Main(m *testing.M, checks, short int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		n := checks
		if testing.Short() {
			n = short
		}
		flag.Set("rapid.checks", strconv.Itoa(n))
	}
	os.Exit(m.Run())
}
