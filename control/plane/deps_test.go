package plane

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMachinesImportNoShell: the control plane's state machines are pure —
// they know the shards only through control/message and the ledger only
// through their own value types, which the shell translates — so none of
// them may depend, even indirectly, on a shard, the ledger, the HTTP stack
// or the logger.
func TestMachinesImportNoShell(t *testing.T) {
	forbidden := []string{
		"github.com/tollgated/tollgated/shard",
		"github.com/tollgated/tollgated/ledger",
		"github.com/tollgated/tollgated/httploop",
		"github.com/valyala/fasthttp",
		"github.com/valyala/fastjson",
		"github.com/rs/zerolog",
	}
	for _, pkg := range []string{"./", "../funding", "../durability", "../shares", "../message", "../record"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
