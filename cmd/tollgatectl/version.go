package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// versionString is the module version and VCS revision this binary was
// built from, as tollgated --version prints its own.
func versionString() string {
	ver, revision, goVersion := "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		ver, goVersion = strings.Trim(bi.Main.Version, "()"), bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return fmt.Sprintf("%s (revision %s, %s)", ver, revision, goVersion)
}
