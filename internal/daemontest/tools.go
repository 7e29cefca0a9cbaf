package daemontest

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// Tool builds another module's command, pinned as pkg@version, from the
// Go module proxy into dir and returns its path. Offline and outside CI
// the test is skipped; under CI=true a failed build fails it, so the
// tools' tests always run there.
func Tool(t testing.TB, dir, pkgAtVersion string) string {
	t.Helper()
	pkg, _, _ := strings.Cut(pkgAtVersion, "@")
	cmd := exec.Command("go", "install", pkgAtVersion)
	cmd.Dir = dir // outside this module: the tool resolves its own dependencies
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("building %s: %v\n%s", pkgAtVersion, err, out)
		}
		t.Skipf("building %s (offline?): %v\n%s", pkgAtVersion, err, out)
	}
	return filepath.Join(dir, path.Base(pkg))
}
