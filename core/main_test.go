package core

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's default of 100 cases per property to thousands, so
// the randomized sequences explore deep interleavings on every run. An
// explicit -rapid.checks on the command line wins.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		checks := "3000"
		if testing.Short() {
			checks = "300"
		}
		flag.Set("rapid.checks", checks)
	}
	os.Exit(m.Run())
}
