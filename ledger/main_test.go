package ledger

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's default of 100 cases per property: the rules are
// pure and fast, so random sequences can explore far deeper. An explicit
// -rapid.checks on the command line wins.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		checks := "1000"
		if testing.Short() {
			checks = "200"
		}
		flag.Set("rapid.checks", checks)
	}
	os.Exit(m.Run())
}
