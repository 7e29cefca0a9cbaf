package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/tollgated/tollgated/daemon"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); without
// it the module version from the build info is reported.
var version = ""

// buildInfo is what the binary knows of its build: its version (set at
// link time, else the module's: "devel" when built from a checkout), the
// VCS revision it was built from ("+dirty" when the tree had changes;
// "unknown" outside a checkout) and the Go version. --version prints it;
// the tollgated_build_info metric carries it.
func buildInfo() (ver, revision, goVersion string) {
	ver, revision, goVersion = version, "unknown", runtime.Version()
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if ver == "" {
			ver = strings.Trim(bi.Main.Version, "()") // "(devel)" from a checkout
		}
		goVersion = bi.GoVersion
		dirty := false
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				revision = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = true
			}
		}
		if dirty && revision != "unknown" {
			revision += "+dirty"
		}
	}
	if ver == "" {
		ver = "unknown"
	}
	return ver, revision, goVersion
}

func versionString() string {
	ver, revision, goVersion := buildInfo()
	return fmt.Sprintf("%s (revision %s, %s)", ver, revision, goVersion)
}

// build is buildInfo as the daemon reports it.
func build() daemon.Build {
	ver, revision, goVersion := buildInfo()
	return daemon.Build{Version: ver, Revision: revision, GoVersion: goVersion}
}
