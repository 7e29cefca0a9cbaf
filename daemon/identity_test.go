//go:build linux

package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/control"
)

// TestMatchSpool: the node id a start resolves must be the spool owner's;
// a spool without an owner that holds usage is adopted only beside a
// node-id file (or an id the operator gives), and an empty one belongs to
// whoever starts on it.
func TestMatchSpool(t *testing.T) {
	cfg := Config{DataDir: "/d"}
	for _, c := range []struct {
		id       string
		si       control.SpoolIdentity
		wantInc  uint64
		wantErr  bool
		mentions string
	}{
		{id: "", si: control.SpoolIdentity{Node: "node-a", Incarnation: 2, Used: true}, wantErr: true, mentions: "--node-id node-a"},
		{id: "node-b", si: control.SpoolIdentity{Node: "node-a", Incarnation: 2}, wantErr: true, mentions: `belongs to node "node-a"`},
		{id: "node-a", si: control.SpoolIdentity{Node: "node-a", Incarnation: 2}, wantInc: 2},
		{id: "", si: control.SpoolIdentity{Used: true}, wantErr: true, mentions: "--node-id"},
		{id: "node-a", si: control.SpoolIdentity{Used: true}, wantInc: 1},
		{id: "", si: control.SpoolIdentity{}},
		{id: "node-a", si: control.SpoolIdentity{}},
	} {
		inc, err := matchSpool(cfg, c.id, c.si)
		if (err != nil) != c.wantErr || inc != c.wantInc || (err != nil && (!errors.Is(err, errIdentity) || !strings.Contains(err.Error(), c.mentions))) {
			t.Errorf("id %q, spool %+v: %d, %v; want %d, error %v mentioning %q", c.id, c.si, inc, err, c.wantInc, c.wantErr, c.mentions)
		}
	}
	for _, label := range []string{"node node-a incarnation 3"} {
		if node, n, err := parseOwner(label); err != nil || node != "node-a" || n != 3 {
			t.Fatalf("parseOwner(%q) = %q, %d, %v", label, node, n, err)
		}
	}
	for _, bad := range []string{"node-a", "node node-a incarnation 0", "node a#2 incarnation 2", "node node-a incarnation x"} {
		if _, _, err := parseOwner(bad); err == nil {
			t.Fatalf("parseOwner(%q) accepted", bad)
		}
	}
}
